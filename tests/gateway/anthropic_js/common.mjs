// What both client scripts share: the SDK client from the command line (BASE_URL MODEL), the
// weather tool they offer, and the verdict line the C++ tests read.
import Anthropic from '@anthropic-ai/sdk';

export { Anthropic };

export function setup(timeout) {
  const [baseURL, model] = process.argv.slice(2);
  const client = new Anthropic({ baseURL, apiKey: 'test-key', maxRetries: 0, timeout });
  const failures = [];
  const seen = {};
  const expect = (what, got, want) => {
    if (JSON.stringify(got) !== JSON.stringify(want)) failures.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  };
  // Prints {"ok", "failures", "seen"} as the last line; exits 1 on any mismatch.
  const finish = () => {
    console.log(JSON.stringify({ ok: failures.length === 0, failures, seen }));
    process.exit(failures.length ? 1 : 0);
  };
  return { client, model, failures, seen, expect, finish };
}

export const tools = [{
  name: 'get_weather',
  description: 'Weather forecast for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
}];
