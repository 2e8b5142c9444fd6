package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
)

// The pinned fallbacks example loads, with its fallback as written.
func TestDesignFallbacksExample(t *testing.T) {
	c, err := config.Load("testdata/design_fallbacks.yaml", env(nil))
	if err != nil {
		t.Fatalf("the pinned fallbacks example: %v", err)
	}
	f := c.Jobs.FallbackOf("chat")
	if f == nil || strings.Join(f.Kinds, ",") != "chat-azure" || f.After != 30*time.Second {
		t.Fatalf("chat's fallback: got %+v", f)
	}
	if f := c.Jobs.FallbackOf("chat-azure"); f != nil {
		t.Errorf("chat-azure has no fallback, got %+v", f)
	}
	for kind, want := range map[string]string{"chat": "openai", "chat-azure": "openai", "http": "", "sleep": "sleep", "nope": ""} {
		if got := c.Jobs.FallbackFamily(kind); got != want {
			t.Errorf("FallbackFamily(%q): got %q, want %q", kind, got, want)
		}
	}
}

// after defaults to 30s when the section leaves it out.
func TestFallbackAfterDefault(t *testing.T) {
	path := writeFile(t, "kf.yaml", "jobs:\n  kinds:\n    a:\n      exec: {command: [x]}\n      fallback: {kinds: [b]}\n    b:\n      exec: {command: [y]}\n")
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Jobs.FallbackOf("a").After; got != config.FallbackAfterDefault {
		t.Errorf("after: got %s, want %s", got, config.FallbackAfterDefault)
	}
}

// What the config check refuses in a fallback, each problem with its
// line.
func TestFallbackErrors(t *testing.T) {
	const kinds = "jobs:\n  kinds:\n" +
		"    chat:\n      http: {provider: openai}\n" + // lines 3-4
		"    azure:\n      http: {provider: openai-compatible, url: 'https://east.example.com/openai'}\n" + // 5-6
		"    claude:\n      http: {provider: anthropic}\n" + // 7-8
		"    enrich:\n      http: {url: 'https://api.example.com/v1/enrich'}\n" + // 9-10
		"    resize:\n      exec: {command: [x]}\n" // 11-12
	for _, tt := range []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "an unknown kind",
			yaml: kinds + "    chat2:\n      http: {provider: openai}\n      fallback:\n        kinds: [azure, azur]\n",
			want: []string{`config: FILE: line 16: jobs.kinds.chat2.fallback.kinds[1]: "azur" is not a configured kind (jobs.kinds: azure, chat, chat2, claude, enrich, resize)`},
		},
		{
			name: "a kind of another provider family",
			yaml: kinds + "    chat2:\n      http: {provider: openai}\n      fallback:\n        kinds:\n          - claude\n          - enrich\n          - resize\n",
			want: []string{
				`config: FILE: line 17: jobs.kinds.chat2.fallback.kinds[0]: "claude" reads Anthropic requests (provider anthropic), but chat2's items are OpenAI requests (provider openai or openai-compatible): a fallback kind must read the same request`,
				`config: FILE: line 18: jobs.kinds.chat2.fallback.kinds[1]: "enrich" reads plain http requests (http without a provider), but chat2's items are OpenAI requests (provider openai or openai-compatible): a fallback kind must read the same request`,
				`config: FILE: line 19: jobs.kinds.chat2.fallback.kinds[2]: "resize" reads exec items, but chat2's items are OpenAI requests (provider openai or openai-compatible): a fallback kind must read the same request`,
			},
		},
		{
			name: "plain http and exec kinds move only to their own sort",
			yaml: kinds + "    enrich2:\n      http: {url: 'https://b.example.com/v1/enrich'}\n      fallback: {kinds: [azure]}\n" +
				"    resize2:\n      exec: {command: [y]}\n      fallback: {kinds: [enrich]}\n",
			want: []string{
				`config: FILE: line 15: jobs.kinds.enrich2.fallback.kinds[0]: "azure" reads OpenAI requests (provider openai or openai-compatible), but enrich2's items are plain http requests (http without a provider): a fallback kind must read the same request`,
				`config: FILE: line 18: jobs.kinds.resize2.fallback.kinds[0]: "enrich" reads plain http requests (http without a provider), but resize2's items are exec items: a fallback kind must read the same request`,
			},
		},
		{
			name: "a cycle of fallbacks",
			yaml: "jobs:\n  kinds:\n" +
				"    a:\n      exec: {command: [x]}\n      fallback: {kinds: [b]}\n" +
				"    b:\n      exec: {command: [x]}\n      fallback: {kinds: [c]}\n" +
				"    c:\n      exec: {command: [x]}\n      fallback: {kinds: [a]}\n" +
				"    d:\n      exec: {command: [x]}\n      fallback: {kinds: [d]}\n",
			want: []string{
				`config: FILE: line 5: jobs.kinds.a.fallback.kinds[0]: fallbacks form a cycle: a -> b -> c -> a`,
				`config: FILE: line 8: jobs.kinds.b.fallback.kinds[0]: fallbacks form a cycle: b -> c -> a -> b`,
				`config: FILE: line 11: jobs.kinds.c.fallback.kinds[0]: fallbacks form a cycle: c -> a -> b -> c`,
				`config: FILE: line 14: jobs.kinds.d.fallback.kinds[0]: "d" is the kind itself: fallbacks form a cycle (d -> d)`,
			},
		},
		{
			name: "no kinds, a kind twice, no wait",
			yaml: kinds + "    chat2:\n      http: {provider: openai}\n      fallback: {kinds: [], after: 0s}\n" +
				"    chat3:\n      http: {provider: openai}\n      fallback:\n        kinds: [azure, azure]\n",
			want: []string{
				`config: FILE: line 15: jobs.kinds.chat2.fallback.after: must be more than 0, got 0s`,
				`config: FILE: line 15: jobs.kinds.chat2.fallback.kinds: lists no kind: name the kinds its items may run on instead, in order`,
				`config: FILE: line 19: jobs.kinds.chat3.fallback.kinds[1]: "azure" is listed twice`,
			},
		},
		{
			name: "an unknown key in a fallback",
			yaml: kinds + "    chat2:\n      http: {provider: openai}\n      fallback: {kind: [azure]}\n",
			want: []string{`config: FILE: line 15: unknown key "jobs.kinds.chat2.fallback.kind" (did you mean "kinds"?)`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "kf.yaml", tt.yaml)
			_, err := config.Load(path, env(nil))
			want := strings.ReplaceAll(strings.Join(tt.want, "\n"), "FILE", path)
			if err == nil {
				t.Fatalf("want an error, got none")
			}
			if got := err.Error(); got != want {
				t.Fatalf("error mismatch\nwant:\n%s\ngot:\n%s", want, got)
			}
		})
	}
}
