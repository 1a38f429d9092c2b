// Structured outputs on a random-weights model: only the constraint can make these valid, and
// every check here is made by real clients (ajv for JSON Schema, the openai client's zod helper),
// never by the server's own matcher. Prints one JSON line {"ok", "failures", "counts"}.
//   node structured.mjs BASE_URL schemas|tools|parse
import Ajv from "ajv";
import addFormats from "ajv-formats";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const [base, section] = process.argv.slice(2);
const root = base.replace(/\/v1$/, "");
const client = new OpenAI({ baseURL: base, apiKey: "none", maxRetries: 0 });
const failures = [];
const counts = {};
const count = (k) => (counts[k] = (counts[k] || 0) + 1);
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

// Schemas the 200 generations draw from: nested objects, arrays, enums, anyOf, formats, bounds.
const schemas = [
  { type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 130 } },
    required: ["name", "age"], additionalProperties: false },
  { type: "object", properties: { colour: { enum: ["red", "green", "blue"] }, shade: { type: "number", minimum: 0, maximum: 1 } },
    required: ["colour"] },
  { type: "array", items: { type: "integer", minimum: -50, maximum: 50 }, minItems: 1, maxItems: 5 },
  { type: "object", properties: { point: { type: "object", properties: { x: { type: "number" }, y: { type: "number" } }, required: ["x", "y"] },
    label: { anyOf: [{ type: "string", maxLength: 8 }, { type: "null" }] } }, required: ["point", "label"] },
  { type: "object", properties: { items: { type: "array", maxItems: 3, items: { type: "object",
    properties: { sku: { type: "string", pattern: "^[A-Z]{3}-[0-9]{2}$" }, qty: { type: "integer", minimum: 1, maximum: 9 } },
    required: ["sku", "qty"], additionalProperties: false } } }, required: ["items"] },
  { anyOf: [{ type: "boolean" }, { type: "object", properties: { ok: { const: true }, at: { type: "string", format: "date" } }, required: ["ok", "at"] }] },
  { type: "object", properties: { id: { type: "string", format: "uuid" }, kind: { enum: ["a", 1, null, false] },
    tags: { type: "array", items: { type: "string", maxLength: 4 }, maxItems: 2 } }, required: ["id", "kind", "tags"] },
  { $defs: { node: { type: "object", properties: { v: { type: "integer", minimum: 0, maximum: 9 },
    kids: { type: "array", maxItems: 2, items: { $ref: "#/$defs/node" } } }, required: ["v"] } }, $ref: "#/$defs/node" },
];

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

async function post(path, body) {
  const r = await fetch(root + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

function check(what, schema, text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    failures.push({ what, error: "not JSON: " + e.message, text });
    return;
  }
  const validate = ajv.compile(schema);
  if (!validate(v)) failures.push({ what, error: ajv.errorsText(validate.errors), text });
  else count(what);
}

// Runs `jobs` with at most `width` in flight (the worker batches them).
async function pool(jobs, width) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < jobs.length) await jobs[next++]();
  }));
}

async function schemaSection() {
  const jobs = [];
  for (let i = 0; i < 200; ++i) {
    const schema = schemas[i % schemas.length];
    const seed = 1000 + i;
    const what = `schema${i % schemas.length}`;
    if (i % 10 === 8) {  // SGLang /generate with sampling_params.json_schema
      jobs.push(async () => {
        const r = await post("/generate", { text: "Give JSON: ", sampling_params: { json_schema: JSON.stringify(schema), max_new_tokens: 400, temperature: 1, seed } });
        if (r.status !== 200) return failures.push({ what, error: "status " + r.status, body: r.json });
        if (r.json.meta_info.finish_reason.type !== "stop") return failures.push({ what, error: "did not finish", text: r.json.text });
        check(what, schema, r.json.text);
      });
    } else if (i % 10 === 9) {  // /v1/completions with response_format
      jobs.push(async () => {
        const r = await client.completions.create({ model: "demo-model", prompt: "JSON: ", max_tokens: 400, temperature: 1, seed,
          response_format: { type: "json_schema", json_schema: { name: "s", schema } } });
        if (r.choices[0].finish_reason !== "stop") return failures.push({ what, error: "did not finish", text: r.choices[0].text });
        check(what, schema, r.choices[0].text);
      });
    } else {
      jobs.push(async () => {
        const stream = i % 10 < 3;
        const req = { model: "demo-model", messages: [{ role: "user", content: "Answer in JSON." }], max_tokens: 400, temperature: 1, seed,
          response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } }, ...noThinking };
        let text = "", finish = null;
        if (stream) {
          for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
            text += chunk.choices[0]?.delta?.content ?? "";
            finish = chunk.choices[0]?.finish_reason ?? finish;
          }
        } else {
          const r = await client.chat.completions.create(req);
          text = r.choices[0].message.content;
          finish = r.choices[0].finish_reason;
        }
        if (finish !== "stop") return failures.push({ what, error: "finish_reason " + finish, text });
        check(what, schema, text);
      });
    }
  }
  // json_object: any object.
  for (let i = 0; i < 10; ++i)
    jobs.push(async () => {
      const r = await client.chat.completions.create({ model: "demo-model", messages: [{ role: "user", content: "JSON please" }], max_tokens: 300,
        temperature: 1, seed: 5000 + i, response_format: { type: "json_object" }, ...noThinking });
      if (r.choices[0].finish_reason !== "stop") return count("json_object_unfinished");  // unbounded nesting may run long
      check("json_object", { type: "object" }, r.choices[0].message.content);
    });
  await pool(jobs, 8);
}

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 }, days: { type: "integer", minimum: 1, maximum: 7 },
      unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] } } },
  { type: "function", function: { name: "add", parameters: { type: "object",
    properties: { a: { type: "number", minimum: -1000, maximum: 1000 }, b: { type: "number", minimum: -1000, maximum: 1000 }, tags: { type: "array", items: { type: "boolean" }, maxItems: 3 } },
    required: ["a", "b"], additionalProperties: false } } },
];

async function toolSection() {
  const jobs = [];
  // A random-weights model rarely picks an end token by itself: with parallel calls allowed it
  // would keep calling until max_tokens. A bias towards the ends of an assistant turn (allowed
  // only where the grammar is complete) makes it stop after a call, as a trained model does.
  const endBias = {};
  for (const t of ["<|observation|>", "<|user|>", "<|endoftext|>"]) endBias[(await post("/tokenize", { prompt: t })).json.tokens[0]] = 8;
  const byName = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
  for (let i = 0; i < 40; ++i) {
    const named = i % 2 === 0;
    const stream = i % 4 < 2;
    const single = i % 8 >= 4;
    const choice = named ? { type: "function", function: { name: i % 3 ? "add" : "get_weather" } } : "required";
    const what = `${named ? "named" : "required"}-${stream ? "stream" : "plain"}`;
    jobs.push(async () => {
      const req = { model: "demo-model", messages: [{ role: "user", content: "Use a tool." }], tools, tool_choice: choice, max_tokens: 400,
        temperature: 1, seed: 7000 + i, parallel_tool_calls: !single, logit_bias: endBias, ...noThinking };
      let calls = [], finish = null;
      if (stream) {
        const acc = [];
        for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
          for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
            acc[d.index] ??= { name: "", arguments: "" };
            if (d.function?.name) acc[d.index].name = d.function.name;
            acc[d.index].arguments += d.function?.arguments ?? "";
          }
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        calls = acc;
      } else {
        const r = await client.chat.completions.create(req);
        calls = (r.choices[0].message.tool_calls ?? []).map((c) => c.function);
        finish = r.choices[0].finish_reason;
      }
      if (finish !== "tool_calls") return failures.push({ what, error: "finish_reason " + finish, calls });
      if (calls.length === 0) return failures.push({ what, error: "no tool call" });
      if (single && calls.length !== 1) return failures.push({ what, error: `parallel_tool_calls false but ${calls.length} calls` });
      for (const c of calls) {
        if (named && c.name !== choice.function.name) return failures.push({ what, error: `called ${c.name}, wanted ${choice.function.name}` });
        if (!byName[c.name]) return failures.push({ what, error: "unknown function " + c.name });
        check(what, byName[c.name], c.arguments);
      }
    });
  }
  await pool(jobs, 8);
}

async function parseSection() {
  // The openai client's structured-output helper: zod schema -> response_format -> parsed object.
  const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120),
    pets: z.array(z.enum(["cat", "dog"])).max(2), email: z.string().email().nullable() });
  for (let i = 0; i < 10; ++i) {
    const r = await client.chat.completions.parse({ model: "demo-model", messages: [{ role: "user", content: "Describe a person." }],
      response_format: zodResponseFormat(Person, "person"), max_tokens: 300, temperature: 1, seed: 9000 + i, ...noThinking });
    const msg = r.choices[0].message;
    if (!msg.parsed) failures.push({ what: "parse", error: "no parsed value", content: msg.content, refusal: msg.refusal });
    else if (!Person.safeParse(msg.parsed).success) failures.push({ what: "parse", error: "zod rejects", parsed: msg.parsed });
    else count("parse");
  }
  // logit_bias and min_tokens through the OpenAI client (token ids via return_tokens_as_token_ids).
  const ids = (r) => r.choices[0].logprobs.tokens.map((t) => Number(t.replace("token_id:", "")));
  const complete = (extra) => client.completions.create({ model: "demo-model", prompt: "hello there", max_tokens: 4, temperature: 0,
    logprobs: 0, return_tokens_as_token_ids: true, ignore_eos: true, ...extra });
  const plain = ids(await complete({}));
  const banned = ids(await complete({ logit_bias: { [plain[0]]: -100 } }));
  if (banned.includes(plain[0])) failures.push({ what: "logit_bias -100", error: `token ${plain[0]} still sampled`, banned });
  else count("logit_bias-ban");
  const forced = ids(await complete({ logit_bias: { 100: 100 } }));
  if (forced.some((t) => t !== 100)) failures.push({ what: "logit_bias +100", error: "not forced", forced });
  else count("logit_bias-force");
  const eos = (await post("/tokenize", { prompt: "<|endoftext|>" })).json.tokens[0];
  const ended = await complete({ logit_bias: { [eos]: 100 }, ignore_eos: false, max_tokens: 20 });
  const held = await complete({ logit_bias: { [eos]: 100 }, ignore_eos: false, max_tokens: 20, min_tokens: 6 });
  if (ended.usage.completion_tokens !== 1 || held.usage.completion_tokens !== 7 || held.choices[0].finish_reason !== "stop")
    failures.push({ what: "min_tokens", error: `EOS favoured: ${ended.usage.completion_tokens} tokens; with min_tokens 6: ${held.usage.completion_tokens} (${held.choices[0].finish_reason})` });
  else count("min_tokens");

  // Errors the client sees: an unsupported keyword and a contradictory request.
  for (const [what, body, param] of [
    ["multipleOf", { response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "integer", multipleOf: 3 } } } }, "response_format.json_schema.schema"],
    ["contradiction", { response_format: { type: "json_object" }, tools, tool_choice: "required" }, "response_format"],
    ["min_tokens", { max_tokens: 4, min_tokens: 9 }, "min_tokens"],
  ]) {
    try {
      await client.chat.completions.create({ model: "demo-model", messages: [{ role: "user", content: "x" }], ...body });
      failures.push({ what, error: "accepted" });
    } catch (e) {
      if (e.status !== 400 || e.param !== param) failures.push({ what, error: `status ${e.status} param ${e.param}: ${e.message}` });
      else count("error-" + what);
    }
  }
}

try {
  if (section === "schemas") await schemaSection();
  else if (section === "tools") await toolSection();
  else if (section === "parse") await parseSection();
  else throw new Error("unknown section " + section);
} catch (e) {
  failures.push({ what: section, error: String(e && e.stack || e) });
}
console.log(JSON.stringify({ ok: failures.length === 0, failures: failures.slice(0, 20), counts }));
