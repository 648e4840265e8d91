/*
 * app.js - the demo page of POST /charge. Plain browser JavaScript, no build
 * step, no external resources. Posts to /charge on the same origin.
 */
'use strict';

(function () {
	const VIEW_MAX_CHARS = 4000;    /* longer bodies are cut in the log view */
	const FORM_ROWS_MAX = 20;       /* more line items: summary, not rows */
	const LARGE_ORDER_ITEMS = 1000;
	const AMOUNT_MAX = 99999999;
	const WATCH_EVERY_MS = 500;     /* an unknown outcome's record is looked up this often */
	const WATCH_MAX_MS = 300000;    /* ... for at most 5 minutes */
	const WEBHOOK_NEAR_MS = 5000;   /* a delivery this close before the settle time settled it */
	const SHOWN_HEADERS = ['Idempotent-Replayed', 'Retry-After',
	    'Idempotency-Key-Expires', 'X-Request-Id', 'Content-Type',
	    'Content-Length', 'WWW-Authenticate', 'Allow'];
	const REASONS = {
		200: 'OK', 201: 'Created', 400: 'Bad Request', 401: 'Unauthorized',
		402: 'Payment Required', 404: 'Not Found',
		405: 'Method Not Allowed', 409: 'Conflict',
		413: 'Content Too Large', 415: 'Unsupported Media Type',
		422: 'Unprocessable Content', 500: 'Internal Server Error',
		502: 'Bad Gateway', 503: 'Service Unavailable',
		504: 'Gateway Timeout'
	};

	const $ = (id) => document.getElementById(id);
	const el = {
		form: $('charge-form'), amount: $('amount'),
		amountHint: $('amount-hint'), currency: $('currency'),
		source: $('source'), apiKey: $('api-key'),
		preferWait: $('prefer-wait'), key: $('idem-key'),
		keyState: $('key-state'), itemsSummary: $('items-summary'),
		itemsTable: $('items-table'), itemsBody: $('items-body'),
		log: $('log'), logEmpty: $('log-empty'), announce: $('announce'),
		providerState: $('provider-state'), providerFacts: $('provider-facts')
	};

	const state = {
		key: '',
		keyUses: 0,
		last: null,     /* {key, apiKey, body, preferWait}: what "Retry" resends */
		items: [],      /* [{description, quantity, unit_amount}] */
		seq: 0
	};

	/* ---- small helpers ---- */

	function uuid() {
		if (window.crypto && typeof crypto.randomUUID === 'function')
			return crypto.randomUUID();
		/* Not a secure context (plain http on a non-loopback host). */
		const b = crypto.getRandomValues(new Uint8Array(16));
		b[6] = (b[6] & 0x0f) | 0x40;
		b[8] = (b[8] & 0x3f) | 0x80;
		const h = Array.from(b, (x) => x.toString(16).padStart(2, '0'));
		return h.slice(0, 4).join('') + '-' + h.slice(4, 6).join('') + '-' +
		    h.slice(6, 8).join('') + '-' + h.slice(8, 10).join('') + '-' +
		    h.slice(10).join('');
	}

	async function sha256hex(bytes) {
		if (!window.crypto || !crypto.subtle)
			return null;
		const d = await crypto.subtle.digest('SHA-256', bytes);
		return Array.from(new Uint8Array(d),
		    (x) => x.toString(16).padStart(2, '0')).join('');
	}

	function fmtInt(n) {
		return Number(n).toLocaleString('en-US');
	}

	function make(tag, attrs, ...children) {
		const n = document.createElement(tag);
		for (const [k, v] of Object.entries(attrs || {})) {
			if (v === undefined || v === null)
				continue;
			if (k === 'class')
				n.className = v;
			else if (k === 'text')
				n.textContent = v;
			else if (k.startsWith('data-') || k.startsWith('aria-') ||
			    k === 'href' || k === 'role')
				n.setAttribute(k, v);
			else
				n[k] = v;
		}
		for (const c of children) {
			if (c === null || c === undefined)
				continue;
			n.append(c);
		}
		return n;
	}

	/* ---- key ---- */

	function newKey() {
		state.key = uuid();
		state.keyUses = 0;
		el.key.value = state.key;
		renderKeyState();
		el.providerState.textContent = 'Nothing sent with this key yet.';
		el.providerFacts.hidden = true;
		el.providerFacts.replaceChildren();
	}

	/* ---- the provider's side of the key (the simulator's /_sim/keys) ---- */

	async function refreshProvider() {
		const key = state.key;
		let res, doc;
		try {
			res = await fetch('/provider/keys', {cache: 'no-store',
			    credentials: 'omit'});
			doc = res.ok ? await res.json() : null;
		} catch (err) {
			doc = null;
		}
		if (key !== state.key)
			return;
		el.providerFacts.replaceChildren();
		el.providerFacts.hidden = true;
		if (!doc || !Array.isArray(doc.keys)) {
			el.providerState.textContent = 'No provider simulator behind ' +
			    '/provider/ (the service may use its in-process provider: ' +
			    'provider_url is empty).';
			return;
		}
		const k = doc.keys.find((x) => x && x.metadata &&
		    x.metadata.charge_idempotency_key === key);
		if (!k) {
			el.providerState.textContent = 'The provider has not seen ' +
			    'this key (nothing delivered to it yet).';
			return;
		}
		el.providerState.textContent = k.charges === 1 ?
		    'One charge, however many deliveries.' :
		    'No charge at the provider for this key.';
		const fact = (dt, dd) => el.providerFacts.append(make('dt',
		    {text: dt}), make('dd', {text: String(dd)}));
		fact('Deliveries', k.deliveries);
		fact('Charges', k.charges);
		fact('Charge', k.charge || '\u2013');
		fact('Stored answer', k.status === null || k.status === undefined ?
		    'none' : k.status);
		fact('Downstream key', k.idempotency_key);
		el.providerFacts.hidden = false;
		el.providerFacts.dataset.deliveries = String(k.deliveries);
		el.providerFacts.dataset.charges = String(k.charges);
		el.providerFacts.dataset.charge = k.charge || '';
		const events = k.charge ? await providerEvents(k.charge) : null;
		if (key !== state.key || events === null)
			return;
		fact('Webhook', webhookText(events));
		el.providerFacts.dataset.webhook = events.length === 0 ? 'none' :
		    events.every((e) => (e.deliveries || []).some((d) =>
		    d.state === 'delivered')) ? 'delivered' : 'pending';
	}

	/* The simulator's webhook events of a charge (its /_sim/events through
	 * /provider/events), or null when there is no simulator behind it. */
	async function providerEvents(charge) {
		try {
			const res = await fetch('/provider/events?charge=' +
			    encodeURIComponent(charge), {cache: 'no-store',
			    credentials: 'omit'});
			const doc = res.ok ? await res.json() : null;
			return doc && Array.isArray(doc.events) ? doc.events : null;
		} catch (err) {
			return null;
		}
	}

	/* "charge.succeeded: delivered (503, 503, 200)" per event. */
	function webhookText(events) {
		if (events.length === 0)
			return 'no event sent (the simulator runs without --webhook-url)';
		return events.map((e) => e.type + ': ' +
		    (e.deliveries || []).map((d) => d.state + ' (' +
		    ((d.attempts || []).map((a) => a.status === null ?
		    (a.error || 'no answer') : String(a.status)).join(', ') ||
		    'not tried yet') + ')').join('; ')).join(' \u00b7 ');
	}

	/* The webhook event whose delivery settled the record at updatedMs (a
	 * 200 that started shortly before), or null. */
	async function settlingEvent(key, updatedMs) {
		let doc;
		try {
			const res = await fetch('/provider/keys', {cache: 'no-store',
			    credentials: 'omit'});
			doc = res.ok ? await res.json() : null;
		} catch (err) {
			return null;
		}
		const k = doc && Array.isArray(doc.keys) ? doc.keys.find((x) =>
		    x && x.metadata && x.metadata.charge_idempotency_key === key) :
		    null;
		if (!k || !k.charge)
			return null;
		const events = await providerEvents(k.charge);
		for (const e of events || []) {
			for (const d of e.deliveries || []) {
				for (const a of d.attempts || []) {
					if (a.status === 200 && a.at_ms <= updatedMs + 50 &&
					    updatedMs - a.at_ms < WEBHOOK_NEAR_MS)
						return e;
				}
			}
		}
		return null;
	}

	function renderKeyState() {
		el.keyState.textContent = state.keyUses === 0 ?
		    'Not used yet: the next request with it executes a charge.' :
		    'Used by ' + state.keyUses + ' request' +
		    (state.keyUses === 1 ? '' : 's') + '. The same parameters replay ' +
		    'the recorded outcome; other parameters get 422.';
	}

	/* ---- amount and line items ---- */

	function itemsTotal() {
		let t = 0;
		for (const it of state.items)
			t += (Number(it.quantity) || 0) * (Number(it.unit_amount) || 0);
		return t;
	}

	function renderAmountHint() {
		const amount = Number(el.amount.value);
		const cur = el.currency.value.trim().toUpperCase();
		let text = '';
		if (Number.isInteger(amount) && /^[A-Z]{3}$/.test(cur)) {
			try {
				const f = new Intl.NumberFormat('en-US',
				    {style: 'currency', currency: cur});
				const digits = f.resolvedOptions().maximumFractionDigits;
				text = '= ' + f.format(amount / Math.pow(10, digits));
			} catch (e) {
				text = '';
			}
		}
		if (state.items.length > 0)
			text += (text ? '; ' : '') + 'computed from ' +
			    fmtInt(state.items.length) + ' line item' +
			    (state.items.length === 1 ? '' : 's');
		el.amountHint.textContent = text;
	}

	function syncAmount() {
		const has = state.items.length > 0;
		el.amount.readOnly = has;
		if (has)
			el.amount.value = String(itemsTotal());
		renderAmountHint();
	}

	function renderItems() {
		const n = state.items.length;
		el.itemsBody.replaceChildren();
		if (n === 0) {
			el.itemsTable.hidden = true;
			el.itemsSummary.textContent = 'No line items.';
		} else if (n > FORM_ROWS_MAX) {
			el.itemsTable.hidden = true;
			el.itemsSummary.textContent = fmtInt(n) +
			    ' generated line items, total ' + fmtInt(itemsTotal()) +
			    ' (too many to edit here; the response will be large ' +
			    'enough to be spilled to a file).';
		} else {
			el.itemsTable.hidden = false;
			el.itemsSummary.textContent = fmtInt(n) + ' line item' +
			    (n === 1 ? '' : 's') + ', total ' + fmtInt(itemsTotal()) + '.';
			state.items.forEach((it, i) => el.itemsBody.append(itemRow(it, i)));
		}
		syncAmount();
	}

	function itemRow(it, i) {
		const label = ' of line item ' + (i + 1);
		const update = (field, numeric) => (ev) => {
			it[field] = numeric ? Number(ev.target.value) : ev.target.value;
			el.itemsSummary.textContent = fmtInt(state.items.length) +
			    ' line item' + (state.items.length === 1 ? '' : 's') +
			    ', total ' + fmtInt(itemsTotal()) + '.';
			syncAmount();
		};
		const desc = make('input', {type: 'text', value: it.description,
		    maxLength: 200, 'aria-label': 'Description' + label});
		desc.addEventListener('input', update('description', false));
		const qty = make('input', {type: 'number', value: String(it.quantity),
		    min: 1, max: 10000, step: 1, 'aria-label': 'Quantity' + label});
		qty.addEventListener('input', update('quantity', true));
		const unit = make('input', {type: 'number',
		    value: String(it.unit_amount), min: 0, max: AMOUNT_MAX, step: 1,
		    'aria-label': 'Unit amount' + label});
		unit.addEventListener('input', update('unit_amount', true));
		const rm = make('button', {type: 'button', text: 'Remove',
		    'aria-label': 'Remove line item ' + (i + 1)});
		rm.addEventListener('click', () => {
			state.items.splice(i, 1);
			renderItems();
		});
		return make('tr', {}, make('td', {}, desc), make('td', {}, qty),
		    make('td', {}, unit), make('td', {}, rm));
	}

	function addItem() {
		if (state.items.length >= LARGE_ORDER_ITEMS)
			return;     /* docs/API.md §5: at most 1000 line items */
		const n = state.items.length + 1;
		state.items.push({description: 'Item ' + n, quantity: 1,
		    unit_amount: 500 * n});
		renderItems();
	}

	function largeOrder() {
		const items = [];
		for (let i = 0; i < LARGE_ORDER_ITEMS; i++) {
			items.push({
				description: 'Item ' + String(i + 1).padStart(4, '0') +
				    ' of the large demo order',
				quantity: 1 + (i % 3),
				unit_amount: 100 + ((i * 37) % 900)
			});
		}
		state.items = items;
		renderItems();
	}

	/* ---- requests ---- */

	function formBody() {
		const body = {
			amount: Number(el.amount.value),
			currency: el.currency.value.trim(),
			source: el.source.value
		};
		if (state.items.length > 0) {
			body.line_items = state.items.map((it) => ({
				description: it.description,
				quantity: Number(it.quantity),
				unit_amount: Number(it.unit_amount)
			}));
			body.amount = itemsTotal();
		}
		return JSON.stringify(body);
	}

	function preferWait() {
		const v = el.preferWait.value.trim();
		return v === '' ? null : v;
	}

	function currentRequest() {
		return {key: state.key, apiKey: el.apiKey.value.trim(),
		    body: formBody(), preferWait: preferWait()};
	}

	/* Changes the amount of a request body, keeping it valid: +1, or one
	 * more of the first line item when there are line items. */
	function changedBody(bodyText) {
		const b = JSON.parse(bodyText);
		let what;
		if (Array.isArray(b.line_items) && b.line_items.length > 0) {
			const it = b.line_items[0];
			it.quantity += it.quantity < 10000 ? 1 : -1;
			const before = b.amount;
			b.amount = b.line_items.reduce((s, x) =>
			    s + x.quantity * x.unit_amount, 0);
			what = 'amount ' + fmtInt(before) + ' \u2192 ' + fmtInt(b.amount) +
			    ' (quantity of the first line item changed)';
		} else {
			const before = b.amount;
			b.amount = before < AMOUNT_MAX ? before + 1 : before - 1;
			what = 'amount ' + fmtInt(before) + ' \u2192 ' + fmtInt(b.amount);
		}
		return {body: JSON.stringify(b), what: what};
	}

	function abbreviate(text, max) {
		if (text.length <= max)
			return text;
		return text.slice(0, max) + '\u2026';
	}

	function newEntry(action, req, note) {
		state.seq += 1;
		const li = make('li', {class: 'entry pending', 'data-seq': state.seq,
		    'data-action': action, 'data-state': 'pending'});
		const badge = make('span', {class: 'badge', text: 'sending\u2026'});
		const head = make('div', {class: 'entry-head'},
		    make('span', {class: 'num', text: '#' + state.seq}),
		    make('strong', {class: 'action', text: action}), badge,
		    make('span', {class: 'time', text: new Date().toLocaleTimeString()}));
		let reqBlock;
		if (req.lookup) {
			reqBlock = make('details', {class: 'req'},
			    make('summary', {text: 'Request: GET, key ' + req.key}),
			    make('pre', {text: 'GET ' + keyPath(req.key) +
			    '\nAuthorization: Bearer ' + maskKey(req.apiKey)}));
		} else {
			const sent = ['POST /charge',
			    'Authorization: Bearer ' + maskKey(req.apiKey),
			    'Idempotency-Key: ' + req.key,
			    'Content-Type: application/json'];
			if (req.preferWait !== null)
				sent.push('Prefer: wait=' + req.preferWait);
			reqBlock = make('details', {class: 'req'},
			    make('summary', {text: 'Request: ' +
			    fmtInt(new Blob([req.body]).size) + ' bytes, key ' + req.key}),
			    make('pre', {text: sent.join('\n') + '\n\n' +
			    abbreviate(req.body, 600)}));
		}
		const resBlock = make('div', {class: 'res'});
		li.append(head);
		if (note)
			li.append(make('p', {class: 'note', text: note}));
		li.append(reqBlock, resBlock);
		el.log.prepend(li);
		el.logEmpty.hidden = true;
		return {li: li, badge: badge, res: resBlock};
	}

	/* GET /charge/keys/<key>: the key percent-encoded as one path segment. */
	function keyPath(key) {
		return '/charge/keys/' + encodeURIComponent(key);
	}

	/* An HTTP-date or RFC 3339 time as the reader's local time too. */
	function whenText(v) {
		const d = new Date(v);
		if (isNaN(d.getTime()))
			return v;
		return v + ' (' + d.toLocaleString() + ')';
	}

	function maskKey(k) {
		if (k.length <= 8)
			return k;
		return k.slice(0, 8) + '\u2026';
	}

	function statusClass(s) {
		if (s >= 200 && s < 300)
			return 'ok';
		if (s === 409)
			return 'busy';
		if (s >= 400 && s < 500)
			return 'client';
		return 'server';
	}

	async function fillEntry(entry, res, started) {
		const buf = await res.arrayBuffer();
		const ms = Math.round(performance.now() - started);
		const bytes = new Uint8Array(buf);
		const text = new TextDecoder('utf-8').decode(bytes);
		const hash = await sha256hex(buf);
		let json = null;
		try {
			json = JSON.parse(text);
		} catch (e) {
			json = null;
		}
		const replayed = res.headers.get('Idempotent-Replayed');
		const li = entry.li;
		li.classList.remove('pending');
		li.classList.add(statusClass(res.status));
		li.dataset.state = 'done';
		li.dataset.status = String(res.status);
		if (replayed !== null)
			li.dataset.replayed = replayed;
		if (json && typeof json.id === 'string')
			li.dataset.chargeId = json.id;
		if (json && typeof json.type === 'string')
			li.dataset.problem = json.type;
		entry.badge.textContent = res.status + ' ' +
		    (REASONS[res.status] || res.statusText || '');
		el.announce.textContent = li.dataset.action + ': ' +
		    entry.badge.textContent +
		    (replayed === 'true' ? ', replayed' : '');
		entry.badge.className = 'badge ' + statusClass(res.status);

		const facts = make('dl', {class: 'facts'});
		const fact = (k, v, cls) => {
			facts.append(make('dt', {text: k}),
			    make('dd', {class: cls}, v));
		};
		fact('Status', res.status + ' ' + (REASONS[res.status] || ''));
		if (replayed !== null)
			fact('Replayed', replayed === 'true' ?
			    'yes \u2014 the recorded response, byte for byte' :
			    'no \u2014 executed now', replayed === 'true' ? 'replayed' : '');
		if (json && typeof json.id === 'string')
			fact('Charge id', make('code', {class: 'charge-id', text: json.id}));
		if (json && typeof json.type === 'string') {
			const a = make('a', {href: json.type, text: json.type,
			    target: '_blank', rel: 'noopener'});
			fact('Problem type', a);
		}
		if (json && json.decline_code)
			fact('Decline code', make('code', {text: String(json.decline_code)}));
		if (json && Array.isArray(json.mismatched_params)) {
			li.dataset.mismatched = json.mismatched_params.join(',');
			fact('Changed parameters', make('code', {class: 'mismatched',
			    text: json.mismatched_params.join(', ') || '(none named)'}));
		}
		const expires = res.headers.get('Idempotency-Key-Expires');
		if (expires !== null) {
			li.dataset.expires = expires;
			fact(res.status === 409 ? 'Claim lapses' : 'Record kept until',
			    make('span', {class: 'expires', text: whenText(expires)}));
		}
		if (json && li.dataset.action.startsWith('Look up') &&
		    typeof json.state === 'string') {
			li.dataset.keyState = json.state;
			let verdict = 'State ' + json.state;
			if (json.state === 'in_progress')
				verdict += ': the first request is still running; ' +
				    'look again, or retry with Prefer: wait.';
			else if (json.state === 'unknown')
				verdict += ': the provider\'s answer was lost, so the ' +
				    'outcome is not final yet. The provider\'s webhook ' +
				    'event, a retry with this key or the completer settles ' +
				    'it; never charged twice.';
			else
				verdict += ', recorded status ' + json.status +
				    ': one record, so one charge at most. A retry ' +
				    'with this key replays it.';
			fact('Key', make('span', {class: 'verdict', text: verdict}));
			fact('Expires', whenText(json.expires));
		}
		fact('Time', ms + ' ms');
		entry.res.append(facts);

		const hdrs = [];
		for (const h of SHOWN_HEADERS) {
			const v = res.headers.get(h);
			if (v !== null)
				hdrs.push(h + ': ' + v);
		}
		entry.res.append(make('pre', {class: 'headers',
		    'aria-label': 'Response headers', text: hdrs.join('\n')}));

		let pretty = json !== null ? JSON.stringify(json, null, 2) : text;
		const sizeNote = fmtInt(bytes.length) + ' bytes' +
		    (hash ? ', sha256 ' + hash.slice(0, 16) + '\u2026' : '');
		if (pretty.length > VIEW_MAX_CHARS) {
			pretty = pretty.slice(0, VIEW_MAX_CHARS);
			entry.res.append(make('p', {class: 'note truncated',
			    text: 'Body: ' + sizeNote + '. Large body: showing only the ' +
			    'first ' + fmtInt(VIEW_MAX_CHARS) + ' characters.'}));
			pretty += '\n\u2026 (cut; ' + fmtInt(bytes.length) + ' bytes in all)';
		} else {
			entry.res.append(make('p', {class: 'note',
			    text: 'Body: ' + sizeNote}));
		}
		if (hash)
			li.dataset.sha256 = hash;
		li.dataset.bytes = String(bytes.length);
		entry.res.append(make('pre', {class: 'body',
		    'aria-label': 'Response body', tabIndex: 0, text: pretty}));
		return json;
	}

	/* ---- an unknown outcome, watched until it is settled ---- */

	function secs(ms) {
		return (ms / 1000).toFixed(1) + '\u00a0s';
	}

	/* HH:MM:SS.mmm, local time. */
	function clockText(ms) {
		const d = new Date(ms);
		const p2 = (n) => String(n).padStart(2, '0');
		return p2(d.getHours()) + ':' + p2(d.getMinutes()) + ':' +
		    p2(d.getSeconds()) + '.' +
		    String(d.getMilliseconds()).padStart(3, '0');
	}

	/* A 504 outcome-unknown is not final: the provider's signed webhook
	 * event, a retry with the key or the completer settles the record. Looks
	 * it up every WATCH_EVERY_MS (GET /charge/keys/<key>: read-only) and
	 * shows the moment it is settled, for at most WATCH_MAX_MS. */
	function watchUnknown(entry, req) {
		const li = entry.li;
		const answered = Date.now();
		const box = make('p', {class: 'settle waiting'});
		entry.res.insertBefore(box, entry.res.querySelector('pre.headers'));
		li.dataset.settle = 'watching';
		const tick = async () => {
			let doc = null;
			try {
				const res = await fetch(keyPath(req.key), {method: 'GET',
				    headers: {'Authorization': 'Bearer ' + req.apiKey},
				    cache: 'no-store', credentials: 'omit'});
				doc = res.ok ? await res.json() : null;
			} catch (err) {
				doc = null;
			}
			const waited = Date.now() - answered;
			if (doc && (doc.state === 'completed' || doc.state === 'failed')) {
				await showSettled(entry, box, req, doc, answered);
				return;
			}
			const now = doc && typeof doc.state === 'string' ? doc.state :
			    'not readable';
			if (waited >= WATCH_MAX_MS) {
				box.className = 'settle gave-up';
				box.textContent = 'Still ' + now + ' after ' + secs(waited) +
				    ': stopped watching. Look the key up, or retry with it, ' +
				    'later.';
				li.dataset.settle = 'gave-up';
				return;
			}
			box.textContent = 'Not final. Watching the record under this ' +
			    'key (GET ' + keyPath(req.key) + ' every ' +
			    secs(WATCH_EVERY_MS) + ') until the provider\'s webhook ' +
			    'event, a retry or the completer settles it: ' + now +
			    ' for ' + secs(waited) + '.';
			setTimeout(tick, WATCH_EVERY_MS);
		};
		tick();
	}

	async function showSettled(entry, box, req, doc, answered) {
		const li = entry.li;
		const updated = Date.parse(doc.updated);
		const at = isNaN(updated) ? Date.now() : updated;
		const ev = await settlingEvent(req.key, at);
		const ok = doc.state === 'completed';
		box.className = 'settle ' + (ok ? 'ok' : 'client');
		box.replaceChildren(make('strong', {text: 'Settled: ' + doc.state +
		    ', status ' + doc.status}), ' at ' + clockText(at) + ', ' +
		    secs(Math.max(0, at - answered)) + ' after this answer, by ' +
		    (ev ? 'the provider\'s signed webhook event ' : 'a retry or ' +
		    'the completer (no webhook delivery came just before).'),
		    ev ? make('code', {text: ev.id}) : '',
		    ev ? ' (' + ev.type + ').' : '',
		    ' Retry with same key: the recorded ' + doc.status +
		    (ok ? ', with the charge,' : '') + ' replayed.');
		entry.li.querySelector('.entry-head').insertBefore(make('span',
		    {class: 'badge ' + (ok ? 'ok' : 'client'),
		    text: '\u2192 ' + doc.state}), entry.badge.nextSibling);
		li.dataset.settle = doc.state;
		li.dataset.settledStatus = String(doc.status);
		li.dataset.settledBy = ev ? 'webhook' : 'other';
		el.announce.textContent = li.dataset.action + ': the unknown ' +
		    'outcome is settled, ' + doc.state;
		if (req.key === state.key)
			await refreshProvider();
	}

	function failEntry(entry, err) {
		entry.li.classList.remove('pending');
		entry.li.classList.add('server');
		entry.li.dataset.state = 'error';
		entry.badge.textContent = 'network error';
		el.announce.textContent = entry.li.dataset.action + ': network error';
		entry.badge.className = 'badge server';
		entry.res.append(make('p', {class: 'note',
		    text: 'No response: ' + String(err && err.message || err) +
		    '. Retry with the same key: it is safe.'}));
	}

	async function send(action, req, note) {
		const entry = newEntry(action, req, note);
		const headers = {
			'Authorization': 'Bearer ' + req.apiKey,
			'Idempotency-Key': req.key,
			'Content-Type': 'application/json'
		};
		if (req.preferWait !== null)
			headers['Prefer'] = 'wait=' + req.preferWait;
		if (req.key === state.key) {
			state.keyUses += 1;
			renderKeyState();
		}
		const started = performance.now();
		try {
			const res = await fetch('/charge', {method: 'POST',
			    headers: headers, body: req.body, cache: 'no-store',
			    credentials: 'omit'});
			const json = await fillEntry(entry, res, started);
			if (res.status === 504 && json &&
			    json.type === '/problems/outcome-unknown')
				watchUnknown(entry, req);
		} catch (err) {
			failEntry(entry, err);
		}
		if (req.key === state.key)
			await refreshProvider();
		return entry;
	}

	async function lookup(action, req, note) {
		const entry = newEntry(action, req, note);
		const started = performance.now();
		try {
			const res = await fetch(keyPath(req.key), {method: 'GET',
			    headers: {'Authorization': 'Bearer ' + req.apiKey},
			    cache: 'no-store', credentials: 'omit'});
			await fillEntry(entry, res, started);
		} catch (err) {
			failEntry(entry, err);
		}
		return entry;
	}

	/* ---- actions ---- */

	function onLookup() {
		const req = {key: state.key, apiKey: el.apiKey.value.trim(),
		    body: '', preferWait: null, lookup: true};
		lookup('Look up key', req, 'Did my retry charge twice? ' +
		    'GET ' + keyPath(req.key) + ' shows the record under this key ' +
		    '(never its body) without creating or extending it.');
	}

	function onSend(ev) {
		if (ev)
			ev.preventDefault();
		const req = currentRequest();
		state.last = req;
		send('Send', req, null);
	}

	function onRetry() {
		if (!state.last || state.last.key !== state.key) {
			onSend(null);
			return;
		}
		send('Retry with same key', state.last, null);
	}

	function onChange() {
		const base = state.last && state.last.key === state.key ?
		    state.last : currentRequest();
		const c = changedBody(base.body);
		const req = {key: base.key, apiKey: base.apiKey, body: c.body,
		    preferWait: base.preferWait};
		send('Change amount, same key', req, c.what +
		    '; same key, so the service refuses it (expect 422).');
	}

	function onTwo() {
		let note = 'Two identical requests in parallel with the same key.';
		if (state.keyUses > 0) {
			newKey();
			note = 'New key generated (the previous one was already used). ' +
			    note;
		}
		const req = currentRequest();
		state.last = req;
		send('Fire two at once (1 of 2)', req, note);
		send('Fire two at once (2 of 2)', req, note);
	}

	function init() {
		newKey();
		el.form.addEventListener('submit', onSend);
		$('btn-retry').addEventListener('click', onRetry);
		$('btn-change').addEventListener('click', onChange);
		$('btn-two').addEventListener('click', onTwo);
		$('btn-lookup').addEventListener('click', onLookup);
		$('btn-provider').addEventListener('click', refreshProvider);
		$('btn-new-key').addEventListener('click', newKey);
		$('btn-add-item').addEventListener('click', addItem);
		$('btn-large').addEventListener('click', largeOrder);
		$('btn-clear-items').addEventListener('click', () => {
			state.items = [];
			renderItems();
		});
		$('btn-clear-log').addEventListener('click', () => {
			el.log.replaceChildren();
			el.logEmpty.hidden = false;
		});
		el.amount.addEventListener('input', renderAmountHint);
		el.currency.addEventListener('input', renderAmountHint);
		renderItems();
	}

	init();
})();
