package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// Decoding runs in two passes over one YAML document:
//
//  1. A walker goes over the parsed node tree against rawConfig by
//     reflection and reports every problem with its line and key path:
//     unknown keys, keys set twice, values of the wrong shape or type.
//  2. When the walker finds nothing, a yaml.Decoder with KnownFields(true) decodes
//     the file into a rawConfig pre-filled with the defaults.
//
// rawConfig mirrors Config's keys. It differs where a file needs more than
// the plain Go type says: sizes with units, and keys whose absence must be
// told apart from a zero value (defaults inside optional sections).

// rawConfig is the decoding target; see Config for the meaning of each key.
type rawConfig struct {
	NATS   NATS    `yaml:"nats"`
	Redis  Redis   `yaml:"redis"`
	Pool   rawPool `yaml:"pool"`
	Worker Worker  `yaml:"worker"`
	Queue  Queue   `yaml:"queue"`
	Jobs   rawJobs `yaml:"jobs"`
	Log    Log     `yaml:"log"`
}

type rawPool struct {
	Name        string          `yaml:"name"`
	LeaseTTL    time.Duration   `yaml:"lease_ttl"`
	Cooldown    time.Duration   `yaml:"cooldown"`
	Credentials []rawCredential `yaml:"credentials"`
}

type rawCredential struct {
	ID            string `yaml:"id"`
	SecretEnv     string `yaml:"secret_env"`
	SecretFile    string `yaml:"secret_file"`
	MaxConcurrent *int   `yaml:"max_concurrent"`
	Rate          string `yaml:"rate"`
}

type rawJobs struct {
	MaxOutput byteSize `yaml:"max_output"`
	Exec      *rawExec `yaml:"exec"`
	HTTP      *rawHTTP `yaml:"http"`
}

type rawExec struct {
	Command []string          `yaml:"command"`
	Timeout *time.Duration    `yaml:"timeout"`
	Dir     string            `yaml:"dir"`
	Env     map[string]string `yaml:"env"`
}

type rawHTTP struct {
	URL     string            `yaml:"url"`
	Method  *string           `yaml:"method"`
	Header  *string           `yaml:"header"`
	Format  *string           `yaml:"format"`
	Headers map[string]string `yaml:"headers"`
	Timeout *time.Duration    `yaml:"timeout"`
}

// defaultRaw returns Default() as a decoding target: keys the file leaves
// out keep their defaults.
func defaultRaw() *rawConfig {
	d := Default()
	return &rawConfig{
		NATS:   d.NATS,
		Redis:  d.Redis,
		Pool:   rawPool{Name: d.Pool.Name, LeaseTTL: d.Pool.LeaseTTL, Cooldown: d.Pool.Cooldown},
		Worker: d.Worker,
		Queue:  d.Queue,
		Jobs:   rawJobs{MaxOutput: byteSize(d.Jobs.MaxOutput)},
		Log:    d.Log,
	}
}

// config converts a decoded rawConfig, filling the defaults of keys that
// optional sections leave out.
func (r *rawConfig) config() *Config {
	c := &Config{
		NATS:   r.NATS,
		Redis:  r.Redis,
		Pool:   Pool{Name: r.Pool.Name, LeaseTTL: r.Pool.LeaseTTL, Cooldown: r.Pool.Cooldown},
		Worker: r.Worker,
		Queue:  r.Queue,
		Jobs:   Jobs{MaxOutput: int(r.Jobs.MaxOutput)},
		Log:    r.Log,
	}
	for _, rc := range r.Pool.Credentials {
		c.Pool.Credentials = append(c.Pool.Credentials, Credential{
			ID:            rc.ID,
			SecretEnv:     rc.SecretEnv,
			SecretFile:    rc.SecretFile,
			MaxConcurrent: valueOr(rc.MaxConcurrent, defaultMaxConc),
			RateText:      rc.Rate,
		})
	}
	if e := r.Jobs.Exec; e != nil {
		c.Jobs.Exec = &ExecJob{
			Command: e.Command,
			Timeout: valueOr(e.Timeout, jobs.ExecTimeoutDefault),
			Dir:     e.Dir,
			Env:     e.Env,
		}
	}
	if h := r.Jobs.HTTP; h != nil {
		c.Jobs.HTTP = &HTTPJob{
			URL:     h.URL,
			Method:  valueOr(h.Method, jobs.HTTPMethodDefault),
			Header:  valueOr(h.Header, jobs.HTTPHeaderDefault),
			Format:  valueOr(h.Format, jobs.HTTPFormatDefault),
			Headers: h.Headers,
			Timeout: valueOr(h.Timeout, jobs.HTTPTimeoutDefault),
		}
	}
	return c
}

func valueOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// byteSize is a size in bytes, written as a whole number of bytes or with a
// KiB, MiB or GiB suffix: 65536, 64KiB, "1 MiB".
type byteSize int

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *byteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a size (e.g. 64KiB), got %s", describe(n))
	}
	v, ok := parseSize(n.Value)
	if !ok {
		return fmt.Errorf("%s is not a size (a number of bytes, or with a KiB, MiB or GiB suffix, e.g. 64KiB)", quote(n.Value))
	}
	*s = byteSize(v)
	return nil
}

func parseSize(text string) (int, bool) {
	t, mult := strings.TrimSpace(text), 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	if t == "" || strings.Trim(t, "0123456789") != "" {
		return 0, false // digits only: no sign, fraction or exponent
	}
	n, err := strconv.Atoi(t)
	if err != nil || n > math.MaxInt/mult {
		return 0, false
	}
	return n * mult, true
}

// parse decodes one YAML file. source names it in errors. An empty file, or
// one holding only comments or a null document, gives the defaults.
func parse(source string, data []byte) (*Config, error) {
	root, ps := document(data)
	if len(ps) > 0 {
		return nil, ps.err(source, nil)
	}
	if root == nil || isNull(resolve(root)) {
		c := Default()
		c.Source = source
		return c, nil
	}
	w := walker{budget: walkBudget, merging: map[*yaml.Node]bool{}}
	w.value(root, reflect.TypeFor[rawConfig](), "")
	if len(w.ps) > 0 {
		return nil, w.ps.err(source, nil)
	}
	raw := defaultRaw()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(raw); err != nil {
		// The walker is meant to find everything the decoder rejects
		// (TestCheckerAgreesWithDecoder, FuzzLoad); this is the safety net,
		// worded without the values the decoder quotes.
		return nil, problems{{msg: "cannot decode: " + cleanYAMLError(err)}}.err(source, nil)
	}
	c := raw.config()
	c.Source = source
	return c, nil
}

// document parses data into the root node of its one YAML document. It
// returns nil and no problem when data holds no document.
func document(data []byte) (*yaml.Node, problems) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, problems{syntaxProblem(err)}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, problems{syntaxProblem(err)}
	default:
		return nil, problems{{line: next.Line, msg: "a second YAML document starts here; the file must hold only one"}}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// parserProblems are the problems the YAML parser (not its scanner)
// reports. The yaml package counts their lines from 0, and leaves out a
// line 0; scanner lines count from 1.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

func syntaxProblem(err error) problem {
	msg, line := strings.TrimPrefix(err.Error(), "yaml: "), 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			msg, line = m[2], n
		}
	}
	if parserProblems[msg] {
		line++
	}
	return problem{line: line, msg: "not valid YAML: " + msg}
}

var backquoted = regexp.MustCompile("`[^`]*`")

// cleanYAMLError words a decoder error on one line, without the values it
// quotes (a value could be a secret pasted in the wrong place).
func cleanYAMLError(err error) string {
	var te *yaml.TypeError
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if errors.As(err, &te) {
		msg = strings.Join(te.Errors, "; ")
	}
	return backquoted.ReplaceAllString(msg, "a value")
}

// walkBudget bounds the nodes the walker visits, so that aliases cannot make it
// expand a small file into an enormous tree.
const walkBudget = 200_000

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// walker checks a node tree against a Go type the way the yaml decoder
// reads it, collecting every problem with its line and key path.
type walker struct {
	ps      problems
	budget  int
	merging map[*yaml.Node]bool // merge sources being walked, to stop cycles
}

// spend takes one step from the budget; false means stop.
func (w *walker) spend(line int) bool {
	w.budget--
	if w.budget == -1 {
		w.ps.addLine(line, "", "the document expands to too many values (aliases?)")
	}
	return w.budget >= 0
}

// value checks n as the value of key path, to be decoded into type t. A
// null value is skipped: the decoder leaves the default in place.
func (w *walker) value(n *yaml.Node, t reflect.Type, path string) {
	line := n.Line
	if n = resolve(n); n == nil || isNull(n) || !w.spend(line) {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			msg := err.Error()
			if strings.HasPrefix(msg, "yaml: ") { // not our UnmarshalYAML's
				msg = fmt.Sprintf("%s cannot be read as %s", describe(n), describeType(t))
			}
			w.ps.addLine(line, path, "%s", msg)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := yamlFields(t)
		w.mapping(n, line, path, func(k, v *yaml.Node, name string) {
			ft, ok := fields[name]
			if !ok {
				w.ps.addLine(k.Line, "", "unknown key %s%s", quote(joinKey(path, name)), suggest(name, fields))
				return
			}
			w.value(v, ft, joinKey(path, name))
		})
	case reflect.Map:
		w.mapping(n, line, path, func(_, v *yaml.Node, name string) {
			w.value(v, t.Elem(), joinKey(path, name))
		})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.ps.addLine(line, path, "want a list, got %s", describe(n))
			return
		}
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if r := resolve(e); r == nil || isNull(r) {
				w.ps.addLine(e.Line, p, "empty list item")
				continue
			}
			w.value(e, t.Elem(), p)
		}
	default:
		w.scalar(n, line, t, path)
	}
}

// mapping checks that n is a mapping, with plain keys each set once, and
// calls entry for each key and value. Merge keys (<<) are followed.
func (w *walker) mapping(n *yaml.Node, line int, path string, entry func(k, v *yaml.Node, name string)) {
	if n.Kind != yaml.MappingNode {
		if path == "" {
			w.ps.addLine(line, "", "want a mapping of keys at the top level, got %s", describe(n))
		} else {
			w.ps.addLine(line, path, "want a mapping of keys, got %s", describe(n))
		}
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !w.spend(k.Line) {
			return
		}
		name, ok := keyName(k)
		if !ok {
			w.ps.addLine(k.Line, path, "a key must be a plain name, got %s", describe(resolve(k)))
			continue
		}
		if prev, dup := seen[name]; dup {
			w.ps.addLine(k.Line, "", "key %s is set twice (also line %d)", quote(joinKey(path, name)), prev)
			continue
		}
		seen[name] = k.Line
		if isMerge(k) {
			w.merge(v, line, path, entry)
			continue
		}
		entry(k, v, name)
	}
}

// merge follows a merge key's value: a mapping, or a list of mappings, whose
// keys count as if written in place (keys written in place win).
func (w *walker) merge(v *yaml.Node, line int, path string, entry func(k, v *yaml.Node, name string)) {
	var maps []*yaml.Node
	switch src := resolve(v); {
	case src == nil:
		maps = []*yaml.Node{nil}
	case src.Kind == yaml.MappingNode:
		maps = []*yaml.Node{src}
	case src.Kind == yaml.SequenceNode:
		for _, e := range src.Content {
			maps = append(maps, resolve(e))
		}
	default:
		maps = []*yaml.Node{nil}
	}
	for _, m := range maps {
		if m == nil || m.Kind != yaml.MappingNode {
			w.ps.addLine(v.Line, path, "a merge (<<) takes a mapping or a list of mappings")
			return
		}
		if w.merging[m] {
			w.ps.addLine(v.Line, path, "a merge (<<) refers to the mapping it is in")
			return
		}
		w.merging[m] = true
		w.mapping(m, line, path, entry)
		delete(w.merging, m)
	}
}

// scalar checks a single value against a plain Go type by decoding it.
func (w *walker) scalar(n *yaml.Node, line int, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		w.ps.addLine(line, path, "want %s, got %s", describeType(t), describe(n))
		return
	}
	if err := n.Decode(reflect.New(t).Interface()); err == nil {
		return
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		w.ps.addLine(line, path, "%s is not a duration (e.g. 30s, 5m)", quote(n.Value))
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		w.ps.addLine(line, path, "%s is not a whole number", quote(n.Value))
	case t.Kind() == reflect.Bool:
		w.ps.addLine(line, path, "%s is not true or false", quote(n.Value))
	default:
		w.ps.addLine(line, path, "%s cannot be read as %s", quote(n.Value), describeType(t))
	}
}

// resolve follows aliases to the node they name; nil if there is none.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i == 100 {
			return nil
		}
		n = n.Alias
	}
	return n
}

// isNull reports whether n is null, which the decoder skips. A value tagged
// !!null that is not a null literal ("!!null x") is not null: the decoder
// rejects it.
func isNull(n *yaml.Node) bool {
	if n.Kind == 0 {
		return true
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!null" {
		return false
	}
	switch n.Value {
	case "", "~", "null", "Null", "NULL":
		return true
	}
	return false
}

// isMerge reports whether k is the merge key <<, as the yaml decoder sees it.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" &&
		(k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// keyName decodes a mapping key as the decoder does.
func keyName(k *yaml.Node) (string, bool) {
	if k = resolve(k); k == nil || k.Kind != yaml.ScalarNode || isNull(k) {
		return "", false
	}
	var s string
	if err := k.Decode(&s); err != nil {
		return "", false
	}
	return s, true
}

func joinKey(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// yamlFields maps the yaml keys of struct type t to their field types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields
}

// suggest returns ` (did you mean "x"?)` for the known key closest to name,
// or "" if none is close.
func suggest(name string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for f := range fields {
		if d := editDistance(name, f); d < bestDist || d == bestDist && f < best {
			best, bestDist = f, d
		}
	}
	if best == "" || bestDist > 2 {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func describe(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.ScalarNode:
		return quote(n.Value)
	}
	return "nothing"
}

func describeType(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "a duration (e.g. 30s, 5m)"
	case t == reflect.TypeFor[byteSize]():
		return "a size (e.g. 64KiB)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "a whole number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return "a single value"
}
