// gRPC between the gateway and a gpu-worker on another host, over TLS: certificates made with
// openssl for the test (a CA, a worker certificate for the name flashtier-worker, a client
// certificate), the real gpu-worker binary requiring client certificates, the real gateway.
// With the right CA, name and client certificate the gateway serves; plaintext, another CA or a
// missing client certificate never get the worker SERVING in the gateway's eyes.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "tests/gateway/gateway_test_util.h"
#include "tests/support/test_paths.h"

namespace ft::test {
namespace {

// Makes ca.pem, DIR/<name>.pem + DIR/<name>.key signed by it; false when openssl fails.
bool make_pki(const std::string& dir) {
  const std::string q = shell_quote(dir);
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string cmd =
      "set -e; cd " + q + "; exec >/dev/null 2>&1\n"
      "openssl req -x509" + ec + " -days 2 -subj /CN=flashtier-test-ca -keyout ca.key -out ca.pem\n"
      "openssl req -x509" + ec + " -days 2 -subj /CN=other-ca -keyout other-ca.key -out other-ca.pem\n"
      "printf 'subjectAltName=DNS:flashtier-worker\\n' > server.ext\n"
      "openssl req" + ec + " -subj /CN=flashtier-worker -keyout server.key -out server.csr\n"
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.pem\n"
      "openssl req" + ec + " -subj /CN=flashtier-gateway -keyout client.key -out client.csr\n"
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out client.pem\n";
  return std::system(cmd.c_str()) == 0;
}

std::vector<std::string> gateway_to(int port, std::vector<std::string> tls) {
  std::vector<std::string> a{"--model-dir", fixture("glm5-tiny-chat/model"), "--port", "0", "--host", "127.0.0.1",
                             "--health-interval-ms", "100", "--worker", "127.0.0.1:" + std::to_string(port)};
  a.insert(a.end(), tls.begin(), tls.end());
  return a;
}

TEST(WorkerTls, MutualTlsServesAndEveryWrongCredentialIsRefused) {
  TempDir dir;
  const std::string d = dir.path();
  if (!make_pki(d)) GTEST_SKIP() << "openssl could not make the test certificates";
  const int port = free_port();
  ChildProcess worker({bin_path("flashtier-gpu-worker"), "--model", fixture("glm5-tiny-chat/model"), "--listen",
                       "127.0.0.1:" + std::to_string(port), "--experts", "local", "--backend", "cpu", "--tls-cert",
                       d + "/server.pem", "--tls-key", d + "/server.key", "--tls-client-ca", d + "/ca.pem"});
  ASSERT_TRUE(worker.wait_for_output("listening on port", 30000)) << worker.output();
  EXPECT_TRUE(worker.wait_for_output("(TLS)", 2000)) << worker.output();

  const std::vector<std::string> good{"--worker-tls-ca", d + "/ca.pem", "--worker-tls-cert", d + "/client.pem",
                                      "--worker-tls-key", d + "/client.key", "--worker-tls-name", "flashtier-worker"};
  {
    GatewayProcess gw(gateway_to(port, good));
    ASSERT_TRUE(gw.wait_healthy(20000)) << gw.report() << worker.output();
    HttpResult r = http_request(gw.port(), "POST", "/v1/completions",
                                R"({"model":"model","prompt":"Hello","max_tokens":5,"temperature":0,"ignore_eos":true})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(parse(r.body)["usage"]["completion_tokens"], 5);
  }
  const std::vector<std::pair<std::string, std::vector<std::string>>> wrong = {
      {"plaintext", {}},
      {"another CA", {"--worker-tls-ca", d + "/other-ca.pem", "--worker-tls-cert", d + "/client.pem", "--worker-tls-key",
                      d + "/client.key", "--worker-tls-name", "flashtier-worker"}},
      {"no client certificate", {"--worker-tls-ca", d + "/ca.pem", "--worker-tls-name", "flashtier-worker"}},
      {"another name", {"--worker-tls-ca", d + "/ca.pem", "--worker-tls-cert", d + "/client.pem", "--worker-tls-key",
                        d + "/client.key", "--worker-tls-name", "not-the-worker"}},
  };
  for (const auto& [what, flags] : wrong) {
    GatewayProcess gw(gateway_to(port, flags));
    EXPECT_FALSE(gw.wait_healthy(1500)) << what << ": the gateway reached the TLS worker";
    EXPECT_EQ(http_request(gw.port(), "POST", "/v1/completions", R"({"model":"model","prompt":"x","max_tokens":2})").status, 503)
        << what;
  }
  // A TLS file that cannot be read stops the gateway at start, naming it.
  try {
    GatewayProcess gw(gateway_to(port, {"--worker-tls-ca", d + "/missing.pem"}));
    ADD_FAILURE() << "the gateway started without its CA file";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--worker-tls-ca: cannot read"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft::test
