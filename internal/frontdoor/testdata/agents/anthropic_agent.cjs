// An agent app on the official @anthropic-ai/sdk client, pointed at
// fmgate: the SDK's own tool runner (beta.messages.toolRunner) offers two
// tools, runs each tool_use block, sends the tool_result blocks back and
// returns the final message; JSON, then streamed. Then a structured
// output parsed by the SDK's own messages.parse. Usage: node
// anthropic_agent.cjs; FMGATE_URL, FMGATE_KEY from the environment. Prints
// one JSON object of what the app saw.
'use strict';
const Anthropic = require('@anthropic-ai/sdk');
const { jsonSchemaOutputFormat } = require('@anthropic-ai/sdk/helpers/json-schema');

const client = new Anthropic({ baseURL: process.env.FMGATE_URL, apiKey: process.env.FMGATE_KEY, maxRetries: 0 });
const calls = [];
const tools = [
  {
    name: 'get_weather',
    description: 'The weather in a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    run: (input) => { calls.push({ name: 'get_weather', args: input }); return '晴れ、最高気温18度'; },
  },
  {
    name: 'get_time',
    description: 'The local time',
    input_schema: { type: 'object', properties: { zone: { type: 'string', enum: ['Asia/Tokyo', 'UTC'] } }, required: ['zone'] },
    run: (input) => { calls.push({ name: 'get_time', args: input }); return '14:05'; },
  },
];

async function loop(stream) {
  calls.length = 0;
  const runner = client.beta.messages.toolRunner({
    model: 'claude-sonnet-4-5',
    max_tokens: 400,
    stream,
    messages: [{ role: 'user', content: 'What is the weather and the local time in 東京?' }],
    tools,
  });
  let turns = 0;
  for await (const step of runner) {
    turns++;
    if (stream) {
      for await (const _ of step) { /* drain the events; the runner accumulates them */ }
    }
  }
  const final = await runner.done();
  const text = final.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  return { text, calls: calls.slice(), turns, stop: final.stop_reason };
}

async function parsed() {
  const message = await client.messages.parse({
    model: 'claude-sonnet-4-5',
    max_tokens: 400,
    messages: [{ role: 'user', content: 'Give me one manga to start with, as JSON.' }],
    output_config: {
      format: jsonSchemaOutputFormat({
        type: 'object',
        properties: { title: { type: 'string' }, volumes: { type: 'integer' } },
        required: ['title', 'volumes'],
        additionalProperties: false,
      }),
    },
  });
  return message.parsed_output;
}

(async () => {
  const out = { json: await loop(false), stream: await loop(true), parsed: await parsed() };
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
