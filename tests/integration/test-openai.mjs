// test-openai.mjs — the acceptance test of the OpenAI endpoint: the official `openai` npm client (a client none
// of us wrote) against a CPU tandem-worker serving models/demo, started by test-openai.sh.
// Greedy answers are compared with the transformers references of the demo model's held-out set
// (tests/fixtures/demo/heldout.jsonl). Prints TAP. Env: TDM_OAI_BASE, TDM_OAI_MODEL,
// TDM_OAI_KEY, TDM_SRCDIR.
import fs from 'node:fs';
import OpenAI from 'openai';

const base = process.env.TDM_OAI_BASE;
const model = process.env.TDM_OAI_MODEL;
const src = process.env.TDM_SRCDIR;
const client = new OpenAI({ baseURL: base, apiKey: process.env.TDM_OAI_KEY, maxRetries: 0, timeout: 120000 });

let n = 0, failed = 0;
function ok(cond, msg, diag) {
  n++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${msg}`);
  if (!cond) {
    failed++;
    for (const l of String(diag ?? '').split('\n').slice(0, 20)) console.log(`#   ${l}`);
  }
  return cond;
}

const allTools = JSON.parse(fs.readFileSync(`${src}/tests/fixtures/demo/tools.json`, 'utf8'));
const heldout = fs.readFileSync(`${src}/tests/fixtures/demo/heldout.jsonl`, 'utf8')
  .split('\n').filter(Boolean).map((l) => JSON.parse(l));
const toolsOf = (names) => names.map((nm) => allTools.find((t) => t.function.name === nm));
const first = (kind) => heldout.find((h) => h.kind === kind);

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

async function main() {
  // models
  const models = await client.models.list();
  ok(models.data.some((m) => m.id === model), `models.list() has ${model}`);

  // plain chat, greedy == reference
  const plain = first('plain');
  const r1 = await client.chat.completions.create({ model, messages: plain.messages, temperature: 0, max_tokens: 64 });
  ok(r1.choices[0].message.content === plain.reference.text && r1.choices[0].finish_reason === 'stop',
    'chat: greedy answer equals the reference', JSON.stringify(r1.choices[0]));
  ok(r1.usage.prompt_tokens > 0 && r1.usage.completion_tokens === plain.reference.ids.length &&
     r1.usage.total_tokens === r1.usage.prompt_tokens + r1.usage.completion_tokens,
    'chat: usage counts', JSON.stringify(r1.usage));

  // streamed: same text, usage chunk, role first
  const s1 = await collect(await client.chat.completions.create({
    model, messages: plain.messages, temperature: 0, max_tokens: 64, stream: true,
    stream_options: { include_usage: true },
  }));
  const text1 = s1.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const last = s1[s1.length - 1];
  ok(s1[0].choices[0].delta.role === 'assistant' && text1 === plain.reference.text,
    'chat stream: role first, deltas concatenate to the reference', text1);
  ok(last.choices.length === 0 && last.usage?.completion_tokens === r1.usage.completion_tokens,
    'chat stream: include_usage gives a final usage chunk', JSON.stringify(last));
  ok(s1.some((c) => c.choices[0]?.finish_reason === 'stop'), 'chat stream: finish_reason stop');

  // tool call, whole
  const tool = first('tool');
  const tools = toolsOf(tool.tools);
  const r2 = await client.chat.completions.create({ model, messages: tool.messages, tools, temperature: 0, max_tokens: 96 });
  const c2 = r2.choices[0];
  const call = c2.message.tool_calls?.[0];
  ok(c2.finish_reason === 'tool_calls' && call && call.id.startsWith('call_') && call.type === 'function' &&
     call.function.name === tool.expected.name &&
     JSON.stringify(JSON.parse(call.function.arguments)) === JSON.stringify(tool.expected.arguments) &&
     (c2.message.content === null || !c2.message.content.includes('<')),
    `tool call: ${tool.expected.name}(${JSON.stringify(tool.expected.arguments)})`, JSON.stringify(c2));

  // tool call, streamed: index/id/name first, arguments incrementally, no markup as content
  const s2 = await collect(await client.chat.completions.create({ model, messages: tool.messages, tools, temperature: 0, max_tokens: 96, stream: true }));
  const deltas = s2.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
  const content2 = s2.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const args2 = deltas.map((d) => d.function?.arguments ?? '').join('');
  ok(deltas.length >= 2 && deltas[0].index === 0 && deltas[0].id?.startsWith('call_') &&
     deltas[0].function.name === tool.expected.name && deltas.slice(1).every((d) => d.id === undefined),
    'tool call stream: the first delta has index, id and name; later ones arguments only', JSON.stringify(deltas));
  ok(args2 === call?.function.arguments && !content2.includes('<'),
    'tool call stream: argument pieces concatenate to the whole reply\'s arguments; no markup', `${args2} | ${content2}`);
  ok(s2.some((c) => c.choices[0]?.finish_reason === 'tool_calls'), 'tool call stream: finish_reason tool_calls');

  // named tool_choice
  const r3 = await client.chat.completions.create({
    model, messages: tool.messages, tools, temperature: 0, max_tokens: 96,
    tool_choice: { type: 'function', function: { name: tool.expected.name } },
  });
  ok(r3.choices[0].message.tool_calls?.[0]?.function.name === tool.expected.name,
    'tool_choice naming the function → that call', JSON.stringify(r3.choices[0]));

  // assistant tool_calls + tool results round-trip
  const after = first('after_result');
  const r4 = await client.chat.completions.create({ model, messages: after.messages, tools: toolsOf(after.tools), temperature: 0, max_tokens: 64 });
  ok(r4.choices[0].message.content === after.reference.text,
    'tool results round-trip: the answer after the result equals the reference', JSON.stringify(r4.choices[0].message));

  // completions with token ids: verbatim, usage.prompt_tokens = count
  const ids = plain.reference.ids.slice(0, 3);
  const r5 = await client.completions.create({ model, prompt: ids, max_tokens: 5, temperature: 0 });
  ok(r5.usage.prompt_tokens === ids.length && r5.choices[0].text.length > 0,
    'completions: token-id prompt used verbatim (usage.prompt_tokens == 3)', JSON.stringify(r5));

  // stop strings: excluded, whole and streamed
  const prompt = 'The weather in Paris is';
  const g = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 });
  const full = g.choices[0].text;
  const cut = Math.min(8, Math.floor(full.length / 2));
  const stop = full.slice(cut, cut + 2);
  const want = full.slice(0, full.indexOf(stop));
  const r6 = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stop: [stop] });
  ok(full.length > 4 && r6.choices[0].text === want && r6.choices[0].finish_reason === 'stop',
    `stop ${JSON.stringify(stop)}: text before it, finish_reason stop`, `${JSON.stringify(full)} → ${JSON.stringify(r6.choices[0])}`);
  const s6 = await collect(await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stop: [stop], stream: true }));
  const t6 = s6.map((c) => c.choices[0]?.text ?? '').join('');
  ok(t6 === want, 'stop in a stream: held back, never sent', JSON.stringify(t6));

  // seeded sampling: same seed → same text; different seeds differ somewhere
  const samp = (seed) => client.completions.create({ model, prompt, max_tokens: 16, temperature: 1.0, top_p: 0.95, seed });
  const [a, b] = [await samp(42), await samp(42)];
  ok(a.choices[0].text === b.choices[0].text, 'seeded sampling: seed 42 twice → the same text', a.choices[0].text);
  const others = await Promise.all([7, 8, 9, 10].map(samp));
  ok(others.some((o) => o.choices[0].text !== a.choices[0].text), 'seeded sampling: other seeds give other text');

  // logprobs: chat shape and legacy shape
  const r7 = await client.chat.completions.create({ model, messages: plain.messages, temperature: 0, max_tokens: 64, logprobs: true, top_logprobs: 3 });
  const lc = r7.choices[0].logprobs?.content ?? [];
  ok(lc.length === r7.usage.completion_tokens - 1 && lc.every((e) => e.top_logprobs.length === 3 &&
     e.top_logprobs[0].token === e.token && e.logprob <= 0 && Array.isArray(e.bytes)) &&
     lc.map((e) => e.token).join('') === r7.choices[0].message.content,
    'chat logprobs: one entry per token (EOS left out), greedy token is top-1, tokens spell the text', JSON.stringify(lc.slice(0, 2)));
  const r8 = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 2 });
  const lp = r8.choices[0].logprobs;
  ok(lp && lp.tokens.length === lp.token_logprobs.length && lp.tokens.length === lp.top_logprobs.length &&
     lp.text_offset.length === lp.tokens.length && Object.keys(lp.top_logprobs[0]).length <= 2,
    'completions logprobs: the legacy shape', JSON.stringify(lp));

  // errors the client surfaces
  try {
    await client.chat.completions.create({ model, messages: plain.messages, n: 2 });
    ok(false, 'n=2 → 400');
  } catch (e) {
    ok(e.status === 400 && e.code === 'unsupported_parameter', 'n=2 → 400 unsupported_parameter', String(e));
  }
  try {
    await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 100000 });
    ok(false, 'over the context → 400');
  } catch (e) {
    ok(e.status === 400 && /3 in the prompt/.test(e.message) && /100000/.test(e.message),
      'prompt + max_tokens over the context → 400 naming both counts', String(e));
  }
  try {
    await new OpenAI({ baseURL: base, apiKey: 'wrong', maxRetries: 0 }).models.list();
    ok(false, 'wrong key → 401');
  } catch (e) {
    ok(e.status === 401, 'wrong API key → 401', String(e));
  }
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  ok(false, `unexpected error: ${e}`, e.stack);
  console.log(`1..${n}`);
  process.exit(1);
});
