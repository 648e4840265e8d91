// demo.test.mjs - drives the demo page (www/index.html) in headless Chromium
// against a running stack and prints TAP lines.
//
// env: BASE_URL    the stack (default http://127.0.0.1:8080)
//      SCREENSHOT  where to save a screenshot (default artifacts/demo.png
//                  next to this file)
//      SETTLE_SCREENSHOT  the whole page once a 504 outcome-unknown is
//                  settled by the webhook (default settle.png beside it)
//      CHROMIUM    the browser binary (default /usr/bin/chromium)
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const BASE_URL = (process.env.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const SCREENSHOT = resolve(process.env.SCREENSHOT || join(HERE, 'artifacts', 'demo.png'));
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 20000;          // per response (tok_providerTimeout: provider_deadline_ms)
const SETTLE_WAIT_MS = 30000;   // a 504 outcome-unknown until the page shows it settled
const SETTLE_SCREENSHOT = resolve(process.env.SETTLE_SCREENSHOT ||
    join(dirname(SCREENSHOT), 'settle.png'));
const SPILL_THRESHOLD = 16384;  // docs/API.md §18.3: bodies above it are spilled
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let n = 0;
let failed = 0;

function diag(msg) {
	for (const line of String(msg).replace(/\x1b\[[0-9;]*m/g, '').split('\n'))
		console.log('# ' + line);
}

async function test(name, fn) {
	n += 1;
	try {
		await fn();
		console.log(`ok ${n} - ${name}`);
	} catch (err) {
		failed += 1;
		console.log(`not ok ${n} - ${name}`);
		diag(err && err.stack ? err.stack.split('\n').slice(0, 4).join('\n') : err);
	}
}

function check(cond, msg) {
	if (!cond)
		throw new Error(msg);
}

function eq(got, want, what) {
	if (got !== want)
		throw new Error(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
}

// Clicks a button and waits until `count` new log entries have a response.
async function act(page, selector, count = 1) {
	const before = await page.locator('#log > li').count();
	const seqBefore = before === 0 ? 0 : Number(await page.locator('#log > li').first().getAttribute('data-seq'));
	await page.click(selector);
	await page.waitForFunction(([seq, c]) => {
		const done = Array.from(document.querySelectorAll('#log > li'))
		    .filter((li) => Number(li.dataset.seq) > seq && li.dataset.state !== 'pending');
		return done.length >= c;
	}, [seqBefore, count], { timeout: WAIT_MS });
	const entries = await page.$$eval('#log > li', (lis, seq) => lis
	    .filter((li) => Number(li.dataset.seq) > seq)
	    .map((li) => ({
		seq: Number(li.dataset.seq),
		action: li.dataset.action,
		state: li.dataset.state,
		status: li.dataset.status ? Number(li.dataset.status) : null,
		replayed: li.dataset.replayed ?? null,
		chargeId: li.dataset.chargeId ?? null,
		problem: li.dataset.problem ?? null,
		expires: li.dataset.expires ?? null,
		mismatched: li.dataset.mismatched ?? null,
		keyState: li.dataset.keyState ?? null,
		sha256: li.dataset.sha256 ?? null,
		bytes: li.dataset.bytes ? Number(li.dataset.bytes) : null,
		badge: li.querySelector('.badge').textContent,
		text: li.innerText
	    })), seqBefore);
	entries.sort((a, b) => a.seq - b.seq);
	return entries;
}

function show(e) {
	return `#${e.seq} ${e.action}: ${e.badge} replayed=${e.replayed} id=${e.chargeId} problem=${e.problem}`;
}

async function main() {
	const profile = mkdtempSync(join(tmpdir(), 'charge-demo-chromium-'));
	let context = null;
	const external = [];
	const pageErrors = [];
	try {
		context = await chromium.launchPersistentContext(profile, {
			executablePath: CHROMIUM,
			headless: true,
			args: ['--headless', '--no-sandbox', '--disable-gpu',
			    '--disable-quic', '--no-first-run',
			    '--disable-background-networking',
			    '--disable-component-update', '--disable-sync'],
			viewport: { width: 1440, height: 900 }
		});
	} catch (err) {
		console.log('1..1');
		console.log('not ok 1 - launch headless Chromium');
		diag(err.message);
		rmSync(profile, { recursive: true, force: true });
		process.exit(1);
	}
	const origin = new URL(BASE_URL).origin;
	const page = context.pages()[0] || await context.newPage();
	page.on('request', (r) => {
		const u = r.url();
		if (!u.startsWith(origin) && !u.startsWith('data:') && !u.startsWith('about:'))
			external.push(u);
	});
	page.on('pageerror', (e) => pageErrors.push(String(e)));
	page.on('console', (m) => {
		// Chromium logs every 4xx/5xx fetch as "Failed to load resource":
		// those are the demo's expected answers, not page errors.
		if (m.type() === 'error' && !/^Failed to load resource/.test(m.text()))
			pageErrors.push('console: ' + m.text());
	});

	let loaded = false;
	await test('demo page loads with a generated Idempotency-Key', async () => {
		const res = await page.goto(BASE_URL + '/', { waitUntil: 'load' });
		check(res && res.ok(), `GET / answered ${res && res.status()}`);
		const title = await page.title();
		check(/charge/i.test(title), `title ${JSON.stringify(title)}`);
		const key = await page.inputValue('#idem-key');
		check(UUID_RE.test(key), `key ${JSON.stringify(key)} is not a UUID v4`);
		eq(await page.inputValue('#api-key'), 'sk_test_demo', 'default API key');
		loaded = true;
	});
	if (!loaded) {
		await context.close();
		rmSync(profile, { recursive: true, force: true });
		console.log(`1..${n}`);
		process.exit(1);
	}

	await test('Look up key before any send: 404 key-not-found', async () => {
		const [e] = await act(page, '#btn-lookup');
		eq(e.status, 404, 'status (' + show(e) + ')');
		eq(e.problem, '/problems/key-not-found', 'problem type');
	});

	let first = null;
	await test('Send: 201, Idempotent-Replayed false, charge id shown', async () => {
		const [e] = await act(page, '#btn-send');
		first = e;
		eq(e.status, 201, 'status (' + show(e) + ')');
		eq(e.replayed, 'false', 'Idempotent-Replayed');
		check(/^ch_[0-9a-f]{24}$/.test(e.chargeId || ''), `charge id ${e.chargeId}`);
		check(e.badge.includes('201'), `badge shows ${e.badge}`);
		check(e.text.includes(e.chargeId), 'charge id visible in the entry');
		check(/Idempotent-Replayed: false/.test(e.text), 'header shown in the entry');
		check(/X-Request-Id: \S+/.test(e.text), 'X-Request-Id shown');
		check(/^\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$/.test(e.expires || ''),
		    `Idempotency-Key-Expires ${e.expires}`);
		check(/Record kept until/.test(e.text) && e.text.includes(e.expires), 'expiry shown');
	});

	await test('Retry with same key: 201, replayed true, same charge id and bytes', async () => {
		const [e] = await act(page, '#btn-retry');
		eq(e.status, 201, 'status (' + show(e) + ')');
		eq(e.replayed, 'true', 'Idempotent-Replayed');
		check(first && e.chargeId === first.chargeId,
		    `charge id ${e.chargeId} vs first ${first && first.chargeId}`);
		if (first && first.sha256 && e.sha256)
			eq(e.sha256, first.sha256, 'sha256 of replayed body');
		check(/Idempotent-Replayed: true/.test(e.text), 'header shown in the entry');
		eq(e.expires, first && first.expires, 'Idempotency-Key-Expires of the replay');
	});

	await test('Look up key after the charge: completed, status 201, one charge', async () => {
		const [e] = await act(page, '#btn-lookup');
		eq(e.status, 200, 'status (' + show(e) + ')');
		eq(e.keyState, 'completed', 'state');
		check(/recorded status 201/.test(e.text), 'the verdict names status 201');
		check(!e.text.includes(first && first.chargeId), 'the lookup does not show the stored body');
	});

	await test('Change amount, same key: 422 idempotency-key-reused', async () => {
		const [e] = await act(page, '#btn-change');
		eq(e.status, 422, 'status (' + show(e) + ')');
		eq(e.problem, '/problems/idempotency-key-reused', 'problem type');
		check(e.badge.includes('422'), `badge shows ${e.badge}`);
		eq(e.mismatched, 'amount', 'mismatched_params');
		check(/Changed parameters/.test(e.text), 'the changed parameters are shown');
	});

	await test('Fire two at once: one fresh 201 and one 409 (or a replay)', async () => {
		const keyBefore = await page.inputValue('#idem-key');
		const es = await act(page, '#btn-two', 2);
		check(es.length === 2, `expected 2 entries, got ${es.length}`);
		diag(es.map(show).join('\n'));
		const keyAfter = await page.inputValue('#idem-key');
		check(keyAfter !== keyBefore, 'a new key was generated for the used one');
		const fresh = es.filter((e) => e.status === 201 && e.replayed === 'false');
		const other = es.filter((e) => !(e.status === 201 && e.replayed === 'false'));
		eq(fresh.length, 1, 'fresh 201 responses');
		const o = other[0];
		check(o.status === 409 || (o.status === 201 && o.replayed === 'true'),
		    `second answer: ${show(o)}`);
		if (o.status === 409) {
			eq(o.problem, '/problems/request-in-progress', 'problem type of the 409');
			check(/Retry-After: \d+/.test(o.text), 'Retry-After shown');
		} else {
			eq(o.chargeId, fresh[0].chargeId, 'replayed charge id');
		}
	});

	await test('screenshot saved', async () => {
		mkdirSync(dirname(SCREENSHOT), { recursive: true });
		await page.screenshot({ path: SCREENSHOT });
		diag('screenshot: ' + SCREENSHOT);
	});

	await test('Large order: 1000 line items, 201 > 16 KiB shown truncated, replay byte-identical', async () => {
		await page.click('#btn-new-key');
		await page.click('#btn-large');
		const amount = Number(await page.inputValue('#amount'));
		check(amount > 0, `amount computed from items: ${amount}`);
		check(await page.locator('#amount').evaluate((x) => x.readOnly), 'amount is read-only with items');
		const [e] = await act(page, '#btn-send');
		eq(e.status, 201, 'status (' + show(e) + ')');
		eq(e.replayed, 'false', 'Idempotent-Replayed');
		check(e.bytes > SPILL_THRESHOLD, `body is ${e.bytes} bytes`);
		check(/showing only the first/.test(e.text), 'truncation note shown');
		const [r] = await act(page, '#btn-retry');
		eq(r.status, 201, 'replay status (' + show(r) + ')');
		eq(r.replayed, 'true', 'replay Idempotent-Replayed');
		eq(r.bytes, e.bytes, 'replayed body size');
		if (e.sha256 && r.sha256)
			eq(r.sha256, e.sha256, 'sha256 of replayed body');
		await page.click('#btn-clear-items');
	});

	await test('tok_chargeDeclined: 402 with decline code card_declined shown', async () => {
		await page.click('#btn-new-key');
		await page.selectOption('#source', 'tok_chargeDeclined');
		const [e] = await act(page, '#btn-send');
		eq(e.status, 402, 'status (' + show(e) + ')');
		eq(e.problem, '/problems/payment-declined', 'problem type');
		check(/card_declined/.test(e.text), 'decline code shown');
		await page.selectOption('#source', 'tok_visa');
	});

	await test('the provider panel: one charge for the key, after two 500s retried with the same downstream key', async () => {
		if (!process.env.SIM_URL) {
			console.log(`# SKIP no provider simulator (build/charge-provider-sim): the in-process provider answers`);
			const t = await page.locator('#provider-state').textContent();
			check(/provider/i.test(t), 'provider panel text: ' + t);
			return;
		}
		await page.click('#btn-new-key');
		await page.selectOption('#source', 'tok_providerError|tok_providerError|tok_visa');
		const [e] = await act(page, '#btn-send');
		eq(e.status, 201, 'status (' + show(e) + ')');
		await page.waitForSelector('#provider-facts[data-charges]', { timeout: WAIT_MS });
		const f = await page.$eval('#provider-facts', (d) => ({ ...d.dataset }));
		eq(f.charges, '1', 'charges at the provider');
		eq(f.deliveries, '3', 'deliveries at the provider');
		eq(f.charge, e.chargeId, 'the provider charge is the 201\'s id');
		const [r] = await act(page, '#btn-retry');
		eq(r.replayed, 'true', 'retry replayed');
		await page.click('#btn-provider');
		await page.waitForFunction(() => document.querySelector('#provider-state').textContent.startsWith('One charge'));
		eq(await page.$eval('#provider-facts', (d) => d.dataset.deliveries), '3', 'deliveries after the replay');
		await page.selectOption('#source', 'tok_visa');
	});

	await test('tok_providerTimeout: 504 outcome-unknown, then the page shows the record completed by the provider\'s webhook event, and the retry replays its charge', async () => {
		if (!process.env.SIM_URL) {
			console.log(`# SKIP no provider simulator (build/charge-provider-sim): no webhooks`);
			return;
		}
		await page.click('#btn-clear-log');
		await page.fill('#amount', '1999');
		await page.click('#btn-new-key');
		await page.selectOption('#source', 'tok_providerTimeout');
		const [e] = await act(page, '#btn-send');
		eq(e.status, 504, 'status (' + show(e) + ')');
		eq(e.problem, '/problems/outcome-unknown', 'problem type');
		const sel = `#log > li[data-seq="${e.seq}"]`;
		const started = Date.now();
		await page.waitForFunction((s) => {
			const li = document.querySelector(s);
			return li && li.dataset.settle && li.dataset.settle !== 'watching';
		}, sel, { timeout: SETTLE_WAIT_MS });
		const s = await page.$eval(sel, (li) => ({ ...li.dataset,
		    box: li.querySelector('.settle').innerText,
		    badges: Array.from(li.querySelectorAll('.badge'), (b) => b.textContent) }));
		diag(`settled ${Date.now() - started} ms after the 504 was shown: ${s.box}`);
		eq(s.settle, 'completed', 'the record\'s state');
		eq(s.settledStatus, '201', 'the recorded status');
		eq(s.settledBy, 'webhook', 'what settled it');
		check(/^Settled: completed, status 201 at /.test(s.box), 'the entry says so: ' + s.box);
		check(/webhook event evt_/.test(s.box), 'the entry names the event: ' + s.box);
		check(s.badges.includes('\u2192 completed'), 'badges ' + JSON.stringify(s.badges));
		await page.waitForSelector('#provider-facts[data-webhook="delivered"]', { timeout: WAIT_MS });
		const f = await page.$eval('#provider-facts', (d) => ({ ...d.dataset, text: d.innerText }));
		eq(f.charges, '1', 'charges at the provider');
		check(/charge\.succeeded: delivered \((503, )+200\)/.test(f.text),
		    'the provider panel shows the event refused while the request waited, then delivered: ' + f.text);
		mkdirSync(dirname(SETTLE_SCREENSHOT), { recursive: true });
		await page.screenshot({ path: SETTLE_SCREENSHOT, fullPage: true });
		diag('screenshot: ' + SETTLE_SCREENSHOT);
		const [r] = await act(page, '#btn-retry');
		eq(r.status, 201, 'retry status (' + show(r) + ')');
		eq(r.replayed, 'true', 'retry Idempotent-Replayed');
		eq(r.chargeId, f.charge, 'the retry\'s charge is the provider\'s');
		await page.selectOption('#source', 'tok_visa');
	});

	await test('no requests to other origins', async () => {
		check(external.length === 0, 'external requests: ' + external.join(', '));
	});

	await test('no JavaScript errors', async () => {
		check(pageErrors.length === 0, pageErrors.join('\n'));
	});

	await context.close();
	rmSync(profile, { recursive: true, force: true });
	console.log(`1..${n}`);
	process.exit(failed === 0 ? 0 : 1);
}

main().catch((err) => {
	console.log('not ok ' + (n + 1) + ' - test harness');
	diag(err && err.stack ? err.stack : err);
	process.exit(1);
});
