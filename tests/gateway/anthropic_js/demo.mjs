// The official @anthropic-ai/sdk client against the real stack on the demo model (random
// weights, so the words are noise): a tool-use conversation (tools, a tool_use block and its
// tool_result in the history, a system prompt) sent streaming and not, greedy, with and without
// thinking. Checks what must hold whatever the model says: well-formed blocks, a stop_reason that
// matches them, usage, and the streamed message equal to the non-streaming one (greedy decoding).
// Prints one JSON line with what it saw; exits 1 on any mismatch.
import { setup, tools } from './common.mjs';

const { client, model, failures, seen, expect, finish } = setup(120000);
const request = {
  model, max_tokens: 24, temperature: 0, tools, system: 'You are a weather bot.',
  messages: [
    { role: 'user', content: 'Weather in Paris for two days?' },
    { role: 'assistant', content: [
      { type: 'text', text: 'Let me look.' },
      { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris', days: 2 } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: 'sunny, 25C' }] },
  ],
};

const check = (what, m, thinking) => {
  expect(`${what}.type`, m.type, 'message');
  expect(`${what}.role`, m.role, 'assistant');
  if (!['end_turn', 'max_tokens', 'tool_use', 'stop_sequence'].includes(m.stop_reason)) failures.push(`${what}.stop_reason ${m.stop_reason}`);
  const calls = m.content.filter((b) => b.type === 'tool_use');
  if ((m.stop_reason === 'tool_use') !== (calls.length > 0 && m.stop_reason !== 'max_tokens'))
    failures.push(`${what}: stop_reason ${m.stop_reason} with ${calls.length} tool_use blocks`);
  for (const b of m.content) {
    if (b.type === 'text' && typeof b.text !== 'string') failures.push(`${what}: text block without text`);
    else if (b.type === 'thinking' && (!thinking || typeof b.thinking !== 'string')) failures.push(`${what}: unexpected thinking block`);
    else if (b.type === 'tool_use' && (b.name !== 'get_weather' || typeof b.input !== 'object')) failures.push(`${what}: bad tool_use ${JSON.stringify(b)}`);
    else if (!['text', 'thinking', 'tool_use'].includes(b.type)) failures.push(`${what}: block type ${b.type}`);
  }
  // Prefix-cache hits count as cache_read_input_tokens, not input_tokens (Anthropic's split).
  const prompt = m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0);
  if (!(prompt > 50 && m.usage.input_tokens >= 1)) failures.push(`${what}.usage ${JSON.stringify(m.usage)}`);
  if (!(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 24)) failures.push(`${what}.usage.output_tokens ${m.usage.output_tokens}`);
};
const strip = (m) => m.content.map((b) => (b.type === 'tool_use' ? { ...b, id: undefined } : b));

for (const thinking of [false, true]) {
  const req = thinking ? { ...request, thinking: { type: 'enabled', budget_tokens: 16 } } : request;
  const tag = thinking ? 'thinking' : 'plain';
  const msg = await client.messages.create(req);
  check(`${tag}.message`, msg, thinking);
  let text = '';
  const stream = client.messages.stream(req);
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  check(`${tag}.stream`, final, thinking);
  expect(`${tag}.stream equals message`, strip(final), strip(msg));
  expect(`${tag}.stream.stop_reason`, final.stop_reason, msg.stop_reason);
  expect(`${tag}.stream.usage`, final.usage.output_tokens, msg.usage.output_tokens);
  expect(`${tag}.stream.prompt`, final.usage.input_tokens + final.usage.cache_read_input_tokens,
         msg.usage.input_tokens + msg.usage.cache_read_input_tokens);
  if (!final.content.some((b) => (b.text ?? b.thinking ?? '').length > 0)) failures.push(`${tag}: no visible text at all`);
  expect(`${tag}.stream.text`, text, final.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
  seen[tag] = { stop_reason: msg.stop_reason, blocks: msg.content.map((b) => b.type), usage: msg.usage };
}

finish();
