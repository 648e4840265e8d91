// charge.go - the Go peer of bench/run --peers: POST /charge in Go with
// net/http and go-redis (Debian's golang-gopkg-redis.v5-dev), the
// provider called over HTTP with kept connections (http.Client), doing
// what the responder does on a fresh charge and a replay: the API key's
// principal, the canonical request and its fingerprint, the claim and the
// record as one EVALSHA each of the project's own lua/claim.lua and
// lua/record.lua (the same arguments), the downstream Idempotency-Key
// (HMAC-SHA256 of principal, key and fingerprint), the form body of
// POST /v1/charges, the 201 charge object rendered from the provider's
// charge. Only the paths the benchmark takes (a fresh charge, a replay)
// are written out; anything else answers a bare error status.
//
// Two provider modes, chosen as the responder chooses its provider:
//   - PEER_PROVIDER_URL set: the provider over HTTP (above).
//   - PEER_PROVIDER_URL empty: the provider in the process, doing what the
//     responder's in-process simulation (src/provider/provider_inproc.c)
//     does for a charge at provider_latency_ms 0: the outcome decided by
//     the source token (tok_chargeDeclined, tok_insufficientFunds,
//     tok_providerError, tok_providerTimeout, or the first element of a
//     chain "a|b"; anything else succeeds), the charge id "ch_" + the first
//     24 hex digits of HMAC-SHA256(secret, principal NUL key NUL
//     fingerprint) (the MAC the HTTP mode sends as the downstream key),
//     answered at once, and one ledger line per call (ms, principal, key,
//     charge id, outcome, amount, currency, tab-separated) written with
//     one write(2) to PEER_PROVIDER_LEDGER, opened O_APPEND once. A
//     succeeded charge is then recorded and answered exactly as in the
//     HTTP mode; any other outcome answers a bare status (402, 502, 504)
//     without a record, as the HTTP mode does for a provider failure.
//
// Environment: PEER_LISTEN (127.0.0.1:PORT), PEER_REDIS_SOCKET,
// PEER_PROVIDER_URL (http://127.0.0.1:PORT, or empty: in-process),
// PEER_PROVIDER_API_KEY (HTTP mode), PEER_PROVIDER_LEDGER (the ledger
// file, in-process mode), PEER_API_KEYS (the responder's api-keys file),
// PEER_LUA_DIR (lua/).
//
// Build: GO111MODULE=off GOPATH=/usr/share/gocode go build charge.go
package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	redis "gopkg.in/redis.v5"
)

const (
	claimTTLMs  = "30000"
	recordTTLMs = 86400000
	secret      = "bench-peer-provider-secret"
	keyPrefix   = "peer:go:idem:"
)

var (
	rdb                 *redis.Client
	claimSha, recordSha string
	principals          = map[string]string{}
	providerURL         string
	providerAuth        string
	client              *http.Client
	ledger              *os.File // in-process mode; nil: over HTTP
)

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func loadKeys(path string) {
	f, err := os.Open(path)
	must(err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fl := strings.Fields(s.Text())
		if len(fl) == 2 && !strings.HasPrefix(fl[0], "#") {
			principals[fl[1]] = fl[0]
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func fnv1a32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

type chargeReq struct {
	Amount   *int64  `json:"amount"`
	Currency *string `json:"currency"`
	Source   *string `json:"source"`
}

type providerCharge struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
}

func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// tokenIs: true when source, or its first element (a chain "a|b"), is tok
// (provider_inproc.c's token_is).
func tokenIs(source, tok string) bool {
	return strings.HasPrefix(source, tok) &&
		(len(source) == len(tok) || source[len(tok)] == '|')
}

// inprocCharge is the in-process provider at latency 0: the outcome of the
// source token, the charge id from the request's MAC (hex), one ledger
// line. It returns the charge, or a status to answer bare when the charge
// did not succeed or the ledger could not be written.
func inprocCharge(principal, key, machex string, amount int64, currency,
	source string) (providerCharge, int) {
	outcome, status := "succeeded", 0
	switch {
	case tokenIs(source, "tok_chargeDeclined"), tokenIs(source, "tok_insufficientFunds"):
		outcome, status = "declined", 402
	case tokenIs(source, "tok_providerError"):
		outcome, status = "error", 502
	case tokenIs(source, "tok_providerTimeout"):
		outcome, status = "timeout", 504
	}
	now := time.Now()
	ch := providerCharge{ID: "ch_" + machex[:24], Created: now.Unix()}
	// ms \t principal \t key \t charge id \t outcome \t amount \t currency
	line := strconv.FormatInt(now.UnixMilli(), 10) + "\t" + principal + "\t" +
		key + "\t" + ch.ID + "\t" + outcome + "\t" +
		strconv.FormatInt(amount, 10) + "\t" + currency + "\n"
	if _, err := ledger.Write([]byte(line)); err != nil {
		return ch, 502
	}
	return ch, status
}

func handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != "POST" || r.URL.Path != "/charge" {
		w.WriteHeader(404)
		return
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(tok))
	principal, ok := principals[hex.EncodeToString(sum[:])]
	if !ok {
		w.WriteHeader(401)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) == 0 || len(key) > 255 {
		w.WriteHeader(400)
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 65536))
	var q chargeReq
	if err != nil || json.Unmarshal(raw, &q) != nil || q.Amount == nil ||
		*q.Amount <= 0 || q.Currency == nil || len(*q.Currency) != 3 ||
		q.Source == nil || *q.Source == "" {
		w.WriteHeader(400)
		return
	}
	members := []string{
		`"amount":` + strconv.FormatInt(*q.Amount, 10),
		`"currency":` + jsonStr(*q.Currency),
		`"source":` + jsonStr(*q.Source),
		`"customer":null`, `"description":null`, `"metadata":{}`,
		`"line_items":[]`,
	}
	canon := "{" + strings.Join(members, ",") + "}"
	var digests strings.Builder
	for _, m := range members {
		fmt.Fprintf(&digests, "%08x", fnv1a32(m))
	}
	fsum := sha256.Sum256([]byte("POST /charge\n" + principal + "\n" + canon))
	fp := hex.EncodeToString(fsum[:])
	owner := randHex(16)
	rkey := keyPrefix + principal + ":" + key
	now := time.Now().UnixMilli()
	res, err := rdb.EvalSha(claimSha, []string{rkey}, fp, owner,
		strconv.FormatInt(now, 10), claimTTLMs, digests.String()).Result()
	if err != nil {
		w.WriteHeader(503)
		return
	}
	if arr, ok := res.([]interface{}); ok && len(arr) == 10 && arr[0] == "recorded" {
		replay(w, arr)
		return
	}
	if res != "claimed" {
		w.WriteHeader(409)
		return
	}
	// the provider: the same downstream key on every attempt
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(principal + "\x00" + key + "\x00" + fp))
	machex := hex.EncodeToString(mac.Sum(nil))
	var ch providerCharge
	if ledger != nil {
		var status int
		if ch, status = inprocCharge(principal, key, machex, *q.Amount,
			*q.Currency, *q.Source); status != 0 {
			w.WriteHeader(status)
			return
		}
	} else {
		dkey := "charge_" + machex
		form := "amount=" + strconv.FormatInt(*q.Amount, 10) +
			"&currency=" + url.QueryEscape(*q.Currency) +
			"&source=" + url.QueryEscape(*q.Source) +
			"&metadata[charge_principal]=" + url.QueryEscape(principal) +
			"&metadata[charge_idempotency_key]=" + url.QueryEscape(key)
		preq, _ := http.NewRequest("POST", providerURL, strings.NewReader(form))
		preq.Header.Set("Authorization", providerAuth)
		preq.Header.Set("Idempotency-Key", dkey)
		preq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		presp, err := client.Do(preq)
		if err != nil {
			w.WriteHeader(504)
			return
		}
		pbody, err := io.ReadAll(presp.Body)
		presp.Body.Close()
		if err != nil || presp.StatusCode != 200 || json.Unmarshal(pbody, &ch) != nil || ch.ID == "" {
			w.WriteHeader(502)
			return
		}
	}
	out := `{"id":` + jsonStr(ch.ID) + `,"object":"charge","status":"succeeded",` +
		canon[1:len(canon)-1] + `,"created":` + strconv.FormatInt(ch.Created, 10) +
		`,"idempotency_key":` + jsonStr(key) + "}"
	now = time.Now().UnixMilli()
	expires := now + recordTTLMs
	rec, err := rdb.EvalSha(recordSha, []string{rkey}, owner, fp,
		digests.String(), "completed", "201", "application/json", "",
		strconv.Itoa(recordTTLMs), strconv.FormatInt(now, 10),
		strconv.FormatInt(expires, 10), "inline", out).Result()
	if err != nil || rec != "ok" {
		w.WriteHeader(503)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Request-Id", randHex(16))
	h.Set("Idempotent-Replayed", "false")
	h.Set("Idempotency-Key-Expires", time.UnixMilli(expires).UTC().Format(http.TimeFormat))
	w.WriteHeader(201)
	_, _ = io.WriteString(w, out)
}

// {'recorded', state, status, content_type, retry_after, body, body_file,
// body_len, body_sha256, expires_ms}
func replay(w http.ResponseWriter, arr []interface{}) {
	status, _ := strconv.Atoi(fmt.Sprint(arr[2]))
	body, _ := arr[5].(string)
	exp, _ := strconv.ParseInt(fmt.Sprint(arr[9]), 10, 64)
	h := w.Header()
	h.Set("Content-Type", fmt.Sprint(arr[3]))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Request-Id", randHex(16))
	h.Set("Idempotent-Replayed", "true")
	h.Set("Idempotency-Key-Expires", time.UnixMilli(exp).UTC().Format(http.TimeFormat))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func main() {
	rdb = redis.NewClient(&redis.Options{Network: "unix",
		Addr: os.Getenv("PEER_REDIS_SOCKET"), PoolSize: 256})
	dir := os.Getenv("PEER_LUA_DIR")
	for _, s := range []struct {
		file string
		sha  *string
	}{{"claim.lua", &claimSha}, {"record.lua", &recordSha}} {
		text, err := os.ReadFile(dir + "/" + s.file)
		must(err)
		*s.sha, err = rdb.ScriptLoad(string(text)).Result()
		must(err)
	}
	loadKeys(os.Getenv("PEER_API_KEYS"))
	mode := "the provider over HTTP"
	if os.Getenv("PEER_PROVIDER_URL") == "" {
		path := os.Getenv("PEER_PROVIDER_LEDGER")
		if path == "" {
			log.Fatal("in-process provider (PEER_PROVIDER_URL empty): PEER_PROVIDER_LEDGER is not set")
		}
		var err error
		ledger, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0644)
		must(err)
		mode = "the provider in the process"
	}
	providerURL = strings.TrimRight(os.Getenv("PEER_PROVIDER_URL"), "/") + "/v1/charges"
	providerAuth = "Bearer " + os.Getenv("PEER_PROVIDER_API_KEY")
	client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024,
		IdleConnTimeout: 60 * time.Second}}
	log.Printf("charge peer (Go) listening on %s, %s", os.Getenv("PEER_LISTEN"), mode)
	must(http.ListenAndServe(os.Getenv("PEER_LISTEN"), http.HandlerFunc(handle)))
}
