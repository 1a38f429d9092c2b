#!/usr/bin/env python3
"""The whole stack on the GPU: flashtier-local --backend cuda on a model fixture, driven over HTTP.

Checks, against the fixture's reference.safetensors (transformers' greedy tokens):
  * /v1/completions with each case's prompt ids at temperature 0 returns exactly generated_ids
    (as token ids);
  * SGLang's /generate returns the same ids;
  * 8 concurrent streams give the same tokens as the 8 sequential requests;
  * JSON-schema constrained chat completions (sampled, temperature 1: the constraint alone must
    make them valid) parse and satisfy the schema (checked here, not by our matcher).
Prints one line per check and exits non-zero on any failure.

usage: stack_check.py BIN_DIR FIXTURE_DIR [--backend cuda] [-- FLAG ...]
  (flags after `--` go to flashtier-local as they are, e.g. `-- --gpus 0`)
"""
import concurrent.futures
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request


def read_ids(path):
    # safetensors: 8-byte header length, JSON header, raw data; only I64 tensors are read.
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "I64":
            continue
        a, b = t["data_offsets"]
        out[name] = list(struct.unpack("<%dq" % ((b - a) // 8), data[a:b]))
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body, timeout=120):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def completion_ids(port, prompt, n):
    r = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                                       "logprobs": 0, "return_tokens_as_token_ids": True})
    toks = r["choices"][0]["logprobs"]["tokens"]
    return [int(t.split(":", 1)[1]) for t in toks]


SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}


def schema_errors(text):
    """What is wrong with `text` as an instance of SCHEMA (empty: valid)."""
    try:
        v = json.loads(text)
    except ValueError as e:
        return "not JSON (%s): %r" % (e, text[:200])
    if not isinstance(v, dict) or set(v) != {"name", "age", "tags"}:
        return "keys %r" % (sorted(v) if isinstance(v, dict) else type(v).__name__)
    if not isinstance(v["name"], str) or len(v["name"]) > 12:
        return "name %r" % (v["name"],)
    if type(v["age"]) is not int or not 0 <= v["age"] <= 120:
        return "age %r" % (v["age"],)
    if not isinstance(v["tags"], list) or len(v["tags"]) > 3 or any(t not in ("red", "green", "blue") for t in v["tags"]):
        return "tags %r" % (v["tags"],)
    return ""


def constrained(port, model, seed):
    r = post(port, "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Describe a person as JSON."}],
        "temperature": 1.0, "seed": seed, "max_tokens": 200,
        "chat_template_kwargs": {"enable_thinking": False},  # a random model never closes its thinking
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}})
    c = r["choices"][0]
    return c["message"]["content"], c["finish_reason"]


def main():
    bin_dir, fixture = sys.argv[1], sys.argv[2]
    backend = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--backend" else "cuda"
    extra = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    ref = read_ids(os.path.join(fixture, "reference.safetensors"))
    cases = []
    i = 0
    while "case%d.input_ids" % i in ref:
        cases.append((ref["case%d.input_ids" % i], ref["case%d.generated_ids" % i]))
        i += 1
    port = free_port()
    tag = "ftgpu%d" % os.getpid()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([os.path.join(bin_dir, "flashtier-local"), "--model", os.path.join(fixture, "model"),
                             "--port", str(port), "--backend", backend, "--segment", tag + "-seg", "--ring",
                             tag + "-ring"] + extra, stdout=subprocess.PIPE, stderr=log, text=True)
    failures = 0

    def check(name, ok, detail=""):
        nonlocal failures
        print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail))
        failures += 0 if ok else 1

    try:
        deadline = time.time() + 120
        ready = False
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip() == "ready":
                ready = True
                break
        check("stack ready", ready)
        if not ready:
            log.seek(0)
            print(log.read()[-4000:])
            return 1
        for k, (prompt, gen) in enumerate(cases):
            got = completion_ids(port, prompt, len(gen))
            check("completions case %d" % k, got == gen, "" if got == gen else "got %s want %s" % (got, gen))
            g = post(port, "/generate", {"input_ids": prompt, "sampling_params": {"temperature": 0,
                                         "max_new_tokens": len(gen), "ignore_eos": True}})
            check("generate case %d" % k, g["output_ids"] == gen)
        prompts = [cases[j % len(cases)][0][: len(cases[j % len(cases)][0]) - j] for j in range(8)]
        seq = [completion_ids(port, p, 16) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            par = list(ex.map(lambda p: completion_ids(port, p, 16), prompts))
        check("8 concurrent == 8 sequential", par == seq)
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=30) as r:
            model = json.loads(r.read())["data"][0]["id"]
        bad = []
        for seed in range(6):
            text, finish = constrained(port, model, seed)
            err = schema_errors(text) if finish == "stop" else "finish_reason %s" % finish
            if err:
                bad.append("seed %d: %s" % (seed, err))
        check("6 json-schema constrained completions valid", not bad, "; ".join(bad))
    except Exception as e:  # a crash of the stack shows up as a refused connection
        check("requests", False, repr(e))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.seek(0)
        tail = log.read()
        if failures:
            print(tail[-4000:])
        else:
            for line in tail.splitlines():
                if "backend" in line or "cuda engine" in line:
                    print("  " + line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
