package scheduling

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Kinds, key groups and scoped limits through the binaries (issue 25).
// Four llm keys allow 2 starts/s each of scope "slow" (8/s for the fleet)
// and many more of other scopes; one emb key serves the embed kind. A
// batch holds 160 slow items ahead of 60 fast ones (one file); a second
// batch of 30 embed items comes after. With head-of-line blocking the
// slow items fill every slot and the fast and embed items wait behind
// them (about 20 s). Here the fast and embed items are all done while
// most slow items still wait, and the slow scope never goes past its
// limit on any key.
func TestKindsScopesNoHeadOfLineBlocking(t *testing.T) {
	const nLLM = 4
	keys := make([]fakeapi.Key, nLLM+1)
	env := make([]string, 0, nLLM+1)
	var credYAML strings.Builder
	for i := range keys {
		keys[i] = fakeapi.Key{Secret: fmt.Sprintf("sk-kinds-%d-%s", i, strings.Repeat("k", 12))}
		env = append(env, fmt.Sprintf("KEY_%d=%s", i, keys[i].Secret))
		if i < nLLM {
			fmt.Fprintf(&credYAML, "- {id: llm-%d, secret_env: KEY_%d, max_concurrent: 4, groups: [llm], limits: [{rate: 2/s, scope: slow}, {rate: 200/s}]}\n", i, i)
		} else {
			fmt.Fprintf(&credYAML, "- {id: emb-0, secret_env: KEY_%d, max_concurrent: 4, groups: [emb]}\n", i)
		}
	}
	api, err := fakeapi.New(fakeapi.Config{Keys: keys, Latency: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: credYAML.String(),
		Pool:        "scope: {field: model}",
		Worker:      "concurrency: 4\nshutdown_grace: 5s",
		Jobs: fmt.Sprintf("kinds:\n  chat:\n    http: {url: %s/v1/chat, timeout: 10s}\n    credentials: [llm]\n"+
			"  embed:\n    http: {url: %s/v1/embed, timeout: 10s}\n    credentials: [emb]\n", srv.URL, srv.URL),
		Env: env,
	})

	// An unknown kind is refused at enqueue, naming it.
	if r := f.Producer([]byte(`{"id":"x"}`+"\n"), "enqueue", "--batch", "nope", "--kind", "chatt", "-"); r.Code != 2 || !strings.Contains(r.Stderr, "chatt") {
		t.Fatalf("enqueue of an unknown kind: want exit 2 naming it\n%s", r)
	}

	const nSlow, nFast, nEmbed = 160, 60, 30
	var chat strings.Builder
	for i := range nSlow {
		fmt.Fprintf(&chat, `{"id":"slow-%03d","model":"slow"}`+"\n", i)
	}
	for i := range nFast {
		fmt.Fprintf(&chat, `{"id":"fast-%03d","model":"fast"}`+"\n", i)
	}
	if r := f.Producer(nil, "enqueue", "--batch", "chat", "--kind", "chat", f.WriteInput("chat.jsonl", chat.String())); r.Code != 0 {
		t.Fatalf("enqueue chat:\n%s", r)
	}
	if r := f.Producer(nil, "enqueue", "--batch", "emb", "--kind", "embed", f.WriteInput("emb.jsonl", e2etest.JSONLItems(nEmbed, `{"id":%q}`))); r.Code != 0 {
		t.Fatalf("enqueue embed:\n%s", r)
	}
	f.StartWorker("w1")
	f.StartWorker("w2")
	emb := f.WaitResults("emb", nEmbed, 2*time.Minute)
	all := f.WaitResults("chat", nSlow+nFast, 3*time.Minute)

	fastLast, embLast := time.Time{}, time.Time{}
	for _, r := range emb {
		if r.Outcome != kftype.OutcomeSucceeded || r.CredentialID != "emb-0" {
			t.Errorf("embed item %s: %s on %s, want succeeded on emb-0 (its kind's group)", r.Item, r.Outcome, r.CredentialID)
		}
		embLast = later(embLast, r.FinishedAt)
	}
	var slowStarts []kftype.Result
	for _, r := range all {
		if r.Outcome != kftype.OutcomeSucceeded || !strings.HasPrefix(r.CredentialID, "llm-") {
			t.Errorf("chat item %s: %s on %s, want succeeded on an llm key", r.Item, r.Outcome, r.CredentialID)
		}
		if strings.HasPrefix(r.Item, "fast-") {
			fastLast = later(fastLast, r.FinishedAt)
		} else {
			slowStarts = append(slowStarts, r)
		}
	}
	slowBefore := func(at time.Time) int {
		n := 0
		for _, r := range slowStarts {
			if r.FinishedAt.Before(at) {
				n++
			}
		}
		return n
	}
	// 8 slow starts a second at most: 160 take 20 s. The fast and embed
	// items, not bound by the slow scope, must not wait for them: not even
	// take turns with them (a slot freed by a slow item going to a fast
	// one, then to a slow one again, finishes the fast items after about
	// as many slow ones, 60).
	t.Logf("slow items done when the last fast item was: %d; when the last embed item was: %d", slowBefore(fastLast), slowBefore(embLast))
	if n := slowBefore(fastLast); n > nSlow/6 {
		t.Errorf("the last fast item finished after %d of %d slow items: fast items waited behind the slow scope (head-of-line blocking)", n, nSlow)
	}
	if n := slowBefore(embLast); n > nSlow/6 {
		t.Errorf("the last embed item finished after %d of %d slow items: the emb group waited behind the llm group", n, nSlow)
	}
	// The slow scope's limit held on every key: at most 2 starts in any
	// 1 s (leased_at is the pool's clock).
	byKey := map[string][]time.Time{}
	for _, r := range slowStarts {
		byKey[r.CredentialID] = append(byKey[r.CredentialID], r.LeasedAt)
	}
	for id, ts := range byKey {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 2; i < len(ts); i++ {
			if ts[i].Sub(ts[i-2]) < time.Second {
				t.Errorf("key %s: 3 slow starts within %s (limit rate=2/s,scope=slow)", id, ts[i].Sub(ts[i-2]))
				break
			}
		}
	}

	// status --json shows groups and scoped limits.
	r := f.Producer(nil, "status", "--json")
	if r.Code != 0 {
		t.Fatalf("status:\n%s", r)
	}
	var st struct {
		Pool struct {
			Credentials []struct {
				ID     string   `json:"id"`
				Groups []string `json:"groups"`
				Limits []struct {
					Limit string `json:"limit"`
					Scope string `json:"scope"`
				} `json:"limits"`
			} `json:"credentials"`
		} `json:"pool"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	seen := 0
	for _, c := range st.Pool.Credentials {
		if c.ID != "llm-0" {
			continue
		}
		seen++
		scopes := []string{}
		for _, l := range c.Limits {
			scopes = append(scopes, l.Scope)
		}
		if !slices.Equal(c.Groups, []string{"llm"}) || !slices.Contains(scopes, "slow") || !slices.Contains(scopes, "") {
			t.Errorf("status --json llm-0: groups %v, limits %+v; want groups [llm] and a limit of scope slow", c.Groups, c.Limits)
		}
	}
	if seen != 1 {
		t.Errorf("status --json: no llm-0 in %s", r.Stdout)
	}
	// batch show lists the batch's scopes (its lanes).
	if r := f.Producer(nil, "batch", "show", "chat", "--json"); r.Code != 0 {
		t.Errorf("batch show:\n%s", r)
	} else {
		var b struct {
			Scopes []string `json:"scopes"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &b); err != nil || !slices.Equal(b.Scopes, []string{"fast", "slow"}) {
			t.Errorf("batch show --json: scopes %v (%v), want [fast slow]\n%s", b.Scopes, err, r.Stdout)
		}
	}
	// creds set --limit takes a scope.
	if r := f.Producer(nil, "creds", "set", "llm-1", "--limit", "rate=200/s", "--limit", "rate=1/s,scope=slow"); r.Code != 0 {
		t.Fatalf("creds set with a scope:\n%s", r)
	}
	if r := f.Producer(nil, "creds", "list"); r.Code != 0 || !strings.Contains(r.Stdout, "rate=1/s,scope=slow") || !strings.Contains(r.Stdout, "llm") {
		t.Errorf("creds list: want the scoped limit and the group\n%s", r)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
