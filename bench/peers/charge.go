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
// Environment: PEER_LISTEN (127.0.0.1:PORT), PEER_REDIS_SOCKET,
// PEER_PROVIDER_URL (http://127.0.0.1:PORT), PEER_PROVIDER_API_KEY,
// PEER_API_KEYS (the responder's api-keys file), PEER_LUA_DIR (lua/).
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
	dkey := "charge_" + hex.EncodeToString(mac.Sum(nil))
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
	var ch providerCharge
	if err != nil || presp.StatusCode != 200 || json.Unmarshal(pbody, &ch) != nil || ch.ID == "" {
		w.WriteHeader(502)
		return
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
	providerURL = strings.TrimRight(os.Getenv("PEER_PROVIDER_URL"), "/") + "/v1/charges"
	providerAuth = "Bearer " + os.Getenv("PEER_PROVIDER_API_KEY")
	client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024,
		IdleConnTimeout: 60 * time.Second}}
	log.Printf("charge peer (Go) listening on %s", os.Getenv("PEER_LISTEN"))
	must(http.ListenAndServe(os.Getenv("PEER_LISTEN"), http.HandlerFunc(handle)))
}
