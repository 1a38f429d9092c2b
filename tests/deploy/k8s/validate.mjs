// Validates Kubernetes manifests against the Kubernetes API's JSON schemas (kubernetes-models,
// generated from the API server's OpenAPI spec: types, required fields, enums, formats) and
// checks the kustomization lists every file. Its schemas allow unknown fields, as the API server
// does by default, so a misspelt optional field is not caught here.
//   node validate.mjs DIR            every *.yaml in DIR
//   node validate.mjs --self-test    shows that broken manifests are refused (so a pass means
//                                    something)
// Prints one line per object; exits 1 if any is invalid.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';

async function modelFor(apiVersion, kind) {
  const group = apiVersion.includes('/') ? apiVersion : `v1`;
  try {
    const mod = await import(`kubernetes-models/${group}/${kind}`);
    return mod[kind] ?? mod.default;
  } catch {
    return null;
  }
}

async function validateObject(doc) {
  if (!doc || !doc.apiVersion || !doc.kind) return ['not a Kubernetes object (apiVersion and kind are required)'];
  const Model = await modelFor(doc.apiVersion, doc.kind);
  if (!Model) return [`unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`];
  const errors = [];
  try {
    new Model(doc).validate();
  } catch (e) {
    errors.push(...(e.errors ?? [e]).map((x) => (x.instancePath ? `${x.instancePath}: ${x.message}` : String(x.message ?? x))));
  }
  return errors;
}

async function validateFile(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const results = [];
  for (const d of docs) {
    if (d.errors.length) {
      results.push({ name: path.basename(file), errors: d.errors.map((e) => e.message) });
      continue;
    }
    const obj = d.toJSON();
    if (obj === null) continue;
    results.push({ name: `${path.basename(file)}: ${obj.kind}/${obj.metadata?.name}`, errors: await validateObject(obj) });
  }
  return results;
}

async function validateDir(dir) {
  let bad = 0;
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort();
  for (const f of files) {
    if (f === 'kustomization.yaml') {
      const k = YAML.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
      const listed = new Set(k.resources ?? []);
      const missing = files.filter((x) => x !== f && !listed.has(x));
      const extra = [...listed].filter((x) => !files.includes(x));
      const errs = [...missing.map((x) => `${x} not in resources`), ...extra.map((x) => `${x} listed but missing`)];
      console.log(`${errs.length ? 'INVALID' : 'valid  '} ${f}${errs.length ? ': ' + errs.join('; ') : ''}`);
      bad += errs.length ? 1 : 0;
      continue;
    }
    for (const r of await validateFile(path.join(dir, f))) {
      console.log(`${r.errors.length ? 'INVALID' : 'valid  '} ${r.name}${r.errors.length ? ': ' + r.errors.join('; ') : ''}`);
      bad += r.errors.length ? 1 : 0;
    }
  }
  return bad;
}

async function selfTest() {
  // Each of these must be refused.
  const base = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x' },
    spec: { selector: { matchLabels: { a: 'b' } }, template: { metadata: { labels: { a: 'b' } },
      spec: { containers: [{ name: 'c', image: 'i' }] } } } };
  const clone = () => JSON.parse(JSON.stringify(base));
  const cases = [];
  let c = clone(); c.spec.replicas = 'two'; cases.push(['replicas is a string', c]);
  c = clone(); delete c.spec.template.spec.containers[0].name; cases.push(['container without a name', c]);
  c = clone(); c.spec.template.spec.containers[0].ports = [{ containerPort: 'http' }]; cases.push(['containerPort not a number', c]);
  c = clone(); delete c.spec.selector; cases.push(['no selector', c]);
  let failed = 0;
  if ((await validateObject(base)).length) { console.log('self-test: the valid Deployment was refused'); failed++; }
  for (const [what, obj] of cases) {
    const errs = await validateObject(obj);
    console.log(`self-test: ${what}: ${errs.length ? 'refused (' + errs[0] + ')' : 'ACCEPTED'}`);
    if (!errs.length) failed++;
  }
  return failed;
}

const arg = process.argv[2];
const bad = arg === '--self-test' ? await selfTest() : await validateDir(arg);
console.log(bad ? `${bad} invalid` : 'all valid');
process.exit(bad ? 1 : 0);
