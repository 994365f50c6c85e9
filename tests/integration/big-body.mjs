// big-body.mjs URL BYTES [TOKEN] — POST a JSON chat body of BYTES bytes with Node's fetch and print
// "status N" and the first bytes of the reply, or "error CODE" when the request failed at the
// socket (what a client sees when a server resets the connection instead of answering).
const [url, bytes, token] = process.argv.slice(2);
const head = '{"model":"demo","messages":[{"role":"user","content":"';
const tail = '"}]}';
const body = head + "x".repeat(Math.max(0, Number(bytes) - head.length - tail.length)) + tail;
const headers = {"content-type": "application/json"};
if (token) headers.authorization = "Bearer " + token;
try {
    const r = await fetch(url, {method: "POST", headers, body});
    const text = await r.text();
    console.log(`status ${r.status} ${text.slice(0, 160).replace(/\s+/g, " ")}`);
} catch (e) {
    console.log(`error ${(e.cause && e.cause.code) || e.message}`);
}
