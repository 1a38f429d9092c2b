// The official @anthropic-ai/sdk client against flashtier-gateway's /v1/messages with a fake
// worker behind it. The worker answers every chat with
//   [reasoning "Let me check." when thinking is on] "I will look it up." + a get_weather call
//   (city "Paris", days 2) ended by <|observation|>,
// except that a prompt containing a tool result gets "It is sunny." ended by <|user|>.
// Checks: non-streaming and streaming messages with thinking, text and tool_use blocks in order,
// the tool round trip (tool_use + tool_result in the history), count_tokens and an error.
// Prints one JSON line with what it saw; exits 1 on any mismatch.
import { Anthropic, setup, tools } from './common.mjs';

const { client, model, failures, seen, expect, finish } = setup(20000);
const ask = { model, max_tokens: 256, tools, messages: [{ role: 'user', content: 'Weather in Paris for two days?' }] };
const thinking = { type: 'enabled', budget_tokens: 128 };
const wantCall = { city: 'Paris', days: 2 };

// What a reply's blocks say, ids left out (they are fresh per reply).
const shape = (content) => content.map((b) => {
  if (b.type === 'text') return { type: 'text', text: b.text };
  if (b.type === 'thinking') return { type: 'thinking', thinking: b.thinking };
  if (b.type === 'tool_use') return { type: 'tool_use', name: b.name, input: b.input };
  return { type: b.type };
});
const wantBlocks = [
  { type: 'thinking', thinking: 'Let me check.' },
  { type: 'text', text: 'I will look it up.' },
  { type: 'tool_use', name: 'get_weather', input: wantCall },
];

// 1. Non-streaming, thinking on.
const msg = await client.messages.create({ ...ask, thinking });
seen.message = msg;
expect('message.type', msg.type, 'message');
expect('message.role', msg.role, 'assistant');
expect('message.model', msg.model, model);
expect('message.content', shape(msg.content), wantBlocks);
expect('message.stop_reason', msg.stop_reason, 'tool_use');
expect('message.stop_sequence', msg.stop_sequence, null);
if (!msg.id.startsWith('msg_')) failures.push(`message.id ${msg.id} does not start with msg_`);
const call = msg.content.find((b) => b.type === 'tool_use');
if (!call || !call.id.startsWith('toolu_')) failures.push(`tool_use id ${call?.id} does not start with toolu_`);
if (!(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0)) failures.push(`usage ${JSON.stringify(msg.usage)}`);

// 2. Streaming, thinking on: the SDK's accumulated message equals the non-streaming one, and the
// deltas arrive as events of the right kinds.
const stream = client.messages.stream({ ...ask, thinking });
let text = '', think = '', json = '', events = [];
stream.on('text', (t) => { text += t; });
stream.on('thinking', (t) => { think += t; });
stream.on('inputJson', (partial) => { json += partial; });
stream.on('streamEvent', (e) => { events.push(e.type); });
const final = await stream.finalMessage();
seen.stream = { text, think, json, events: [...new Set(events)] };
expect('stream.content', shape(final.content), wantBlocks);
expect('stream.text', text, 'I will look it up.');
expect('stream.thinking', think, 'Let me check.');
expect('stream.input_json', JSON.parse(json || 'null'), wantCall);
expect('stream.stop_reason', final.stop_reason, 'tool_use');
expect('stream.usage.output_tokens', final.usage.output_tokens, msg.usage.output_tokens);
expect('stream.usage.input_tokens', final.usage.input_tokens, msg.usage.input_tokens);
expect('stream.first_event', events[0], 'message_start');
expect('stream.last_event', events[events.length - 1], 'message_stop');
for (const t of ['content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta'])
  if (!events.includes(t)) failures.push(`stream: no ${t} event`);

// 3. Thinking off (Anthropic's default): no thinking block.
const plain = await client.messages.create(ask);
expect('plain.content', shape(plain.content), wantBlocks.slice(1));

// 4. The tool round trip: the call and its result go back; the answer is text, end_turn.
const followUp = {
  ...ask,
  system: 'You are a weather bot.',
  messages: [
    ...ask.messages,
    { role: 'assistant', content: msg.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call?.id ?? 'x', content: '{"sky": "sunny"}' }] },
  ],
};
const answer = await client.messages.create(followUp);
seen.answer = answer.content;
expect('answer.content', shape(answer.content), [{ type: 'text', text: 'It is sunny.' }]);
expect('answer.stop_reason', answer.stop_reason, 'end_turn');
const answerStream = await client.messages.stream(followUp).finalMessage();
expect('answer.stream.content', shape(answerStream.content), [{ type: 'text', text: 'It is sunny.' }]);

// 5. count_tokens: the same prompt as the message that used it.
const counted = await client.messages.countTokens({ model, tools, messages: ask.messages });
expect('count_tokens', counted.input_tokens, plain.usage.input_tokens + (plain.usage.cache_read_input_tokens ?? 0));

// 6. An invalid field: Anthropic's error shape, through the SDK's error classes.
try {
  await client.messages.create({ ...ask, temperature: 7 });
  failures.push('temperature 7 was accepted');
} catch (e) {
  seen.error = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message };
  expect('error.status', e.status, 400);
  expect('error.type', e.error?.error?.type, 'invalid_request_error');
  if (!String(e.error?.error?.message).includes('temperature')) failures.push(`error message does not name the field: ${e.message}`);
  if (!(e instanceof Anthropic.BadRequestError)) failures.push('error is not a BadRequestError');
}

finish();
