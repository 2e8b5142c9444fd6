package cli

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command's help, groups included, ends its description with the
// exit codes it can return and has examples; the codes of one command are
// not another's (the dashboard and the batch commands never wait for
// items, so 1 for failed items and 130 are not theirs).
func TestEveryCommandListsItsOwnExitCodes(t *testing.T) {
	roots := []*cobra.Command{newProducerCmd(strings.NewReader(""), io.Discard, io.Discard), newWorkerCmd(io.Discard, io.Discard)}
	codeRE := regexp.MustCompile(`(?m)^  ([0-9]+) +\S`)
	codes := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		i := strings.Index(c.Long, "Exit codes:")
		if i < 0 {
			t.Errorf("%s --help lists no exit codes", path)
		} else {
			for _, m := range codeRE.FindAllStringSubmatch(c.Long[i:], -1) {
				codes[path] = append(codes[path], m[1])
			}
			if len(codes[path]) == 0 || codes[path][0] != "0" {
				t.Errorf("%s --help: exit codes %v, want 0 first", path, codes[path])
			}
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s --help has no example", path)
		}
		for _, sub := range c.Commands() {
			if !sub.Hidden && sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	for _, r := range roots {
		walk(r)
	}
	if len(codes) < 20 {
		t.Errorf("walked %d commands: %v", len(codes), codes)
	}
	for path, want := range map[string]string{
		"producer dashboard":    "0 2 3",
		"producer batch":        "0 1 2 3",
		"producer batch list":   "0 2 3",
		"producer batch pause":  "0 2 3",
		"producer batch cancel": "0 1 2 3",
		"producer status":       "0 2 3",
		"producer enqueue":      "0 1 2 3 130",
		"producer results":      "0 1 2 3",
		"producer dlq replay":   "0 1 2 3",
		"producer creds remove": "0 1 2 3",
		"producer creds enable": "0 2 3",
		"producer item show":    "0 2 3",
		"producer config check": "0 2",
		"worker":                "0 2 3 4",
		"producer":              "0 1 2 3 130",
	} {
		if got := strings.Join(codes[path], " "); got != want {
			t.Errorf("%s --help: exit codes %q, want %q", path, got, want)
		}
	}
}

// dashboard --help lists the batch actions (and the page's other write
// actions) and the item endpoint.
func TestDashboardHelpListsItsActions(t *testing.T) {
	var out bytes.Buffer
	if code := ProducerMain([]string{"dashboard", "--help"}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"POST /api/batches/{id}/pause, /resume, /cancel", "batches: pause, resume, cancel",
		"credentials: enable, disable", "dead letters: replay", "GET  /api/batches/{id}/items/{item}"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dashboard --help lacks %q:\n%s", want, out.String())
		}
	}
}

// enqueue --help lists the kinds of the configuration the flags name.
func TestEnqueueHelpListsTheConfiguredKinds(t *testing.T) {
	cfg := t.TempDir() + "/kf.yaml"
	writeFile(t, cfg, "jobs:\n  exec: {command: [/bin/true]}\n  kinds:\n    chat: {http: {url: \"http://x/v1\"}}\n")
	var out bytes.Buffer
	if code := ProducerMain([]string{"enqueue", "--help", "--config", cfg}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if want := "--kind string       job kind: chat, exec (defined by the configuration, " + cfg + "), or sleep; required: it defines several"; !strings.Contains(out.String(), want) {
		t.Errorf("enqueue --help lacks %q:\n%s", want, out.String())
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
