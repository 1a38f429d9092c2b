// The official openai client against flashtier-gateway: a non-streaming chat, a streaming chat,
// a completion, a tool call and an error. The fake worker behind the gateway answers chats with
// reasoning "Thinking hard." + content "Hello from flashtier." and completions with " and so on".
// Prints one JSON line with what it saw; exits 1 on any mismatch.
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
const failures = [];
const expect = (what, got, want) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) failures.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
};
const seen = {};

const models = await client.models.list();
expect('models', models.data.map((m) => m.id), [model]);

const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello!' }], temperature: 0, max_completion_tokens: 64,
});
seen.chat = chat.choices[0].message;
expect('chat.content', chat.choices[0].message.content, 'Hello from flashtier.');
expect('chat.reasoning_content', chat.choices[0].message.reasoning_content, 'Thinking hard.');
expect('chat.finish_reason', chat.choices[0].finish_reason, 'stop');
expect('chat.object', chat.object, 'chat.completion');
if (!(chat.usage?.prompt_tokens > 0)) failures.push('chat.usage missing');

const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello!' }], temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let content = '', reasoning = '', finish = null, chunks = 0, usage = null, role = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  role = c.delta?.role ?? role;
  content += c.delta?.content ?? '';
  reasoning += c.delta?.reasoning_content ?? '';
  finish = c.finish_reason ?? finish;
}
seen.stream = { content, reasoning, finish, chunks };
expect('stream.role', role, 'assistant');
expect('stream.content', content, chat.choices[0].message.content);
expect('stream.reasoning', reasoning, chat.choices[0].message.reasoning_content);
expect('stream.finish_reason', finish, 'stop');
expect('stream.usage', usage?.completion_tokens, chat.usage.completion_tokens);
if (chunks < 4) failures.push(`stream: only ${chunks} chunks`);

const completion = await client.completions.create({ model, prompt: 'One, two, three', max_tokens: 16, temperature: 0 });
seen.completion = completion.choices[0].text;
expect('completion.text', completion.choices[0].text, ' and so on');
expect('completion.finish_reason', completion.choices[0].finish_reason, 'stop');

const cstream = await client.completions.create({ model, prompt: 'One, two, three', max_tokens: 16, stream: true });
let ctext = '';
for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? '';
expect('completion.stream.text', ctext, ' and so on');

try {
  await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], temperature: 7 });
  failures.push('temperature 7 was accepted');
} catch (e) {
  seen.error = { status: e.status, param: e.param ?? e.error?.param };
  expect('error.status', e.status, 400);
  expect('error.param', e.param ?? e.error?.param, 'temperature');
  if (!(e instanceof OpenAI.BadRequestError)) failures.push('error is not a BadRequestError');
}

console.log(JSON.stringify({ ok: failures.length === 0, failures, seen }));
process.exit(failures.length ? 1 : 0);
