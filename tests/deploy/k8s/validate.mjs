// Validates Kubernetes manifests against the Kubernetes API's JSON schemas (kubernetes-models,
// generated from the API server's OpenAPI spec: types, required fields, enums, formats) and
// checks the kustomization lists every file. Its schemas allow unknown fields, as the API server
// does by default, so a misspelt optional field is not caught here.
//   node validate.mjs DIR            every *.yaml in DIR; for an overlay (a kustomization whose
//                                    resources include a directory) the objects it builds
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

// Strategic merge, as kustomize applies a patch file: maps merge key by key, lists of objects
// merge by their merge key (containers and volumes by name, volumeMounts by mountPath, …), other
// lists (args, command) are replaced.
const MERGE_KEYS = { containers: 'name', initContainers: 'name', volumes: 'name', volumeMounts: 'mountPath',
  env: 'name', ports: 'containerPort' };
function strategicMerge(base, patch, key) {
  if (Array.isArray(patch)) {
    const mk = MERGE_KEYS[key];
    if (!mk || !Array.isArray(base)) return patch;
    const out = base.map((x) => x);
    for (const p of patch) {
      const i = out.findIndex((x) => x?.[mk] === p?.[mk]);
      if (i >= 0) out[i] = strategicMerge(out[i], p);
      else out.push(p);
    }
    return out;
  }
  if (patch && typeof patch === 'object') {
    const out = { ...(base && typeof base === 'object' ? base : {}) };
    for (const [k, v] of Object.entries(patch)) out[k] = strategicMerge(base?.[k], v, k);
    return out;
  }
  return patch;
}

// The objects a kustomization directory builds: its resources (files, or directories built the
// same way), then its patch files merged into the object of the same kind and name.
function render(dir) {
  const k = YAML.parse(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8'));
  const objs = [];
  for (const r of k.resources ?? []) {
    const p = path.join(dir, r);
    if (fs.statSync(p).isDirectory()) objs.push(...render(p));
    else for (const d of YAML.parseAllDocuments(fs.readFileSync(p, 'utf8'))) if (d.toJSON()) objs.push(d.toJSON());
  }
  for (const pt of k.patches ?? []) {
    if (!pt.path) throw new Error(`${dir}: only patch files are supported here`);
    const patch = YAML.parse(fs.readFileSync(path.join(dir, pt.path), 'utf8'));
    const i = objs.findIndex((o) => o.kind === patch.kind && o.metadata?.name === patch.metadata?.name);
    if (i < 0) throw new Error(`${pt.path}: patches ${patch.kind}/${patch.metadata?.name}, which no resource has`);
    objs[i] = strategicMerge(objs[i], patch);
  }
  return objs;
}

// An overlay (a kustomization whose resources include a directory): validate what it builds.
async function validateOverlay(dir) {
  let bad = 0;
  let objs = [];
  try {
    objs = render(dir);
  } catch (e) {
    console.log(`INVALID ${dir}: ${e.message}`);
    return 1;
  }
  for (const o of objs) {
    const errs = await validateObject(o);
    console.log(`${errs.length ? 'INVALID' : 'valid  '} (built) ${o.kind}/${o.metadata?.name}${errs.length ? ': ' + errs.join('; ') : ''}`);
    bad += errs.length ? 1 : 0;
  }
  return bad;
}

async function validateDir(dir) {
  let bad = 0;
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort();
  const kust = files.includes('kustomization.yaml') ? YAML.parse(fs.readFileSync(path.join(dir, 'kustomization.yaml'), 'utf8')) : null;
  if (kust && (kust.resources ?? []).some((r) => fs.statSync(path.join(dir, r)).isDirectory())) {
    const listed = new Set([...(kust.patches ?? []).map((p) => p.path), 'kustomization.yaml']);
    const missing = files.filter((x) => !listed.has(x));
    if (missing.length) console.log(`INVALID kustomization.yaml: ${missing.join(', ')} not in patches`);
    return (missing.length ? 1 : 0) + (await validateOverlay(dir));
  }
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
  // The overlay renderer: containers merge by name, args are replaced, new volumes are added.
  const merged = strategicMerge(clone(), { spec: { template: { spec: {
    containers: [{ name: 'c', args: ['x'] }, { name: 'd', image: 'j' }], volumes: [{ name: 'v', emptyDir: {} }] } } } });
  const mc = merged.spec.template.spec.containers;
  const mergeOk = mc.length === 2 && mc[0].image === 'i' && mc[0].args[0] === 'x' && mc[1].name === 'd' &&
    merged.spec.template.spec.volumes.length === 1 && merged.spec.selector.matchLabels.a === 'b';
  console.log(`self-test: strategic merge of a patch: ${mergeOk ? 'as kustomize does' : 'WRONG'}`);
  if (!mergeOk) failed++;
  // A patch that breaks a valid object must be refused once built.
  const broken = strategicMerge(clone(), { spec: { template: { spec: { containers: [{ name: 'c', ports: [{ containerPort: 'http' }] }] } } } });
  const be = await validateObject(broken);
  console.log(`self-test: a patch giving a string containerPort: ${be.length ? 'refused (' + be[0] + ')' : 'ACCEPTED'}`);
  if (!be.length) failed++;
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
