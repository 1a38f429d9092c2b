// The official openai client against a running flashtier stack serving the demo model (random
// weights, so the text is gibberish): a chat, a streaming chat and a completion, all greedy.
// What must hold whatever the weights: the shapes, finish reasons, token counts within the
// limits, and a streamed greedy answer equal to the same answer unstreamed.
// Prints one JSON line with what it saw; exits 1 on any mismatch.
import OpenAI from 'openai';

const [baseURL, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const failures = [];
const check = (what, ok, got) => { if (!ok) failures.push(`${what}: got ${JSON.stringify(got)}`); };
const seen = {};
const messages = [{ role: 'user', content: 'Say something.' }];

const models = await client.models.list();
check('models', models.data.length === 1 && models.data[0].id === model, models.data.map((m) => m.id));

const chat = await client.chat.completions.create({ model, messages, temperature: 0, max_completion_tokens: 12 });
const msg = chat.choices[0].message;
const said = (msg.reasoning_content ?? '') + '|' + (msg.content ?? '');
seen.chat = { said, finish: chat.choices[0].finish_reason, usage: chat.usage };
check('chat.role', msg.role === 'assistant', msg.role);
check('chat.finish_reason', ['stop', 'length'].includes(chat.choices[0].finish_reason), chat.choices[0].finish_reason);
check('chat.usage', chat.usage.completion_tokens > 0 && chat.usage.completion_tokens <= 12, chat.usage);

const stream = await client.chat.completions.create({
  model, messages, temperature: 0, max_completion_tokens: 12, stream: true, stream_options: { include_usage: true },
});
let content = '', reasoning = '', finish = null, chunks = 0, usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  content += c.delta?.content ?? '';
  reasoning += c.delta?.reasoning_content ?? '';
  finish = c.finish_reason ?? finish;
}
seen.stream = { chunks, finish };
check('stream.same_as_unstreamed', reasoning + '|' + content === said, reasoning + '|' + content);
check('stream.finish_reason', finish === chat.choices[0].finish_reason, finish);
check('stream.usage', usage?.completion_tokens === chat.usage.completion_tokens, usage);
check('stream.chunks', chunks >= 3, chunks);

const completion = await client.completions.create({ model, prompt: 'One, two, three', max_tokens: 8, temperature: 0 });
seen.completion = { text: completion.choices[0].text, usage: completion.usage };
check('completion.text', typeof completion.choices[0].text === 'string', completion.choices[0].text);
check('completion.finish_reason', ['stop', 'length'].includes(completion.choices[0].finish_reason), completion.choices[0].finish_reason);
check('completion.usage', completion.usage.completion_tokens > 0 && completion.usage.completion_tokens <= 8, completion.usage);

console.log(JSON.stringify({ ok: failures.length === 0, failures, seen }));
process.exit(failures.length ? 1 : 0);
