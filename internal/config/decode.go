package config

import (
	"bytes"
	"cmp"
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

	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Decoding is one walk over the YAML node tree of one document, against
// Config's own types by reflection. It assigns every value, reports every
// problem with its line and key path (unknown keys, with a "did you mean";
// keys set twice; values of the wrong shape or type), and records the line
// of every key it sets, so that validation can name lines too.
//
// Single values are decoded by yaml.v3 itself (yaml.Node.Decode into the
// field's Go type), so scalars mean what they mean to yaml.v3; mappings,
// lists, aliases and merges (<<) are followed here, the way yaml.v3's
// decoder follows them: keys written in place win over merged ones, and of
// several merged mappings the first to set a key wins.
//
// What Go types alone do not say comes from two hooks:
//
//   - a struct created for a list item or an optional section (a pointer
//     field) starts from its type's WithDefaults() value, if it has that
//     method, so that the keys a file leaves out keep their defaults while
//     a key written as 0 stays 0 (and validation says so);
//   - an int field tagged `config:"size"` takes a size with a unit
//     (65536, 64KiB, "1 MiB");
//   - a ratelimit.Limit is written N/PERIOD (ratelimit.ParseLimit), and a
//     creds.Limit as a mapping {rate|cost: N/PERIOD, burst: B, scope: S}
//     (decodeLimit): each is read once, straight into its type.

// keyLines maps key paths ("pool.credentials[0].max_concurrent") to the
// line of the file where each is set: the key's line, or a list item's.
type keyLines map[string]int

// find returns the line of key, else of its nearest ancestor that the file
// sets ("pool.credentials[0]" for a missing "pool.credentials[0].id"), else
// 0.
func (ls keyLines) find(key string) int {
	for key != "" {
		if n, ok := ls[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

// parse decodes one YAML file. source names it in errors. An empty file, or
// one holding only comments or a null document, gives the defaults.
func parse(source string, data []byte) (*Config, error) {
	c, _, err := decode(source, data)
	return c, err
}

// decode is parse that also returns the line of every key the file sets.
func decode(source string, data []byte) (*Config, keyLines, error) {
	c := Default()
	c.Source = source
	root, ps := document(data)
	if len(ps) > 0 {
		return nil, nil, ps.err(source, nil)
	}
	if root == nil || isNull(resolve(root)) {
		return c, nil, nil
	}
	d := decoder{budget: walkBudget, merging: map[*yaml.Node]bool{}, lines: keyLines{}}
	d.value(root, reflect.ValueOf(c).Elem(), "", "")
	if len(d.ps) > 0 {
		return nil, nil, d.ps.err(source, nil)
	}
	return c, d.lines, nil
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

// walkBudget bounds the nodes the decoder visits, so that aliases cannot
// make it expand a small file into an enormous tree.
const walkBudget = 200_000

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	rateType        = reflect.TypeFor[ratelimit.Limit]()
	limitType       = reflect.TypeFor[creds.Limit]()
)

// decoder decodes a node tree into a Go value, collecting every problem
// with its line and key path, and the line of every key.
type decoder struct {
	ps      problems
	lines   keyLines
	budget  int
	merging map[*yaml.Node]bool // merge sources being walked, to stop cycles
}

// spend takes one step from the budget; false means stop.
func (d *decoder) spend(line int) bool {
	d.budget--
	if d.budget == -1 {
		d.ps.addLine(line, "", "the document expands to too many values (aliases?)")
	}
	return d.budget >= 0
}

// value decodes n, the value of key path, into v. hint is the field's
// `config` tag. A null value sets a pointer, map or list to nil and leaves
// anything else as it is (its default), as yaml.v3 does.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path, hint string) {
	line := n.Line
	if n = resolve(n); n == nil || !d.spend(line) {
		return
	}
	if isNull(n) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
			v.SetZero()
		}
		return
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(fresh(v.Type().Elem()).Addr())
		}
		v = v.Elem()
	}
	t := v.Type()
	switch {
	case hint == "size":
		d.size(n, line, v, path)
		return
	case t == rateType:
		d.rate(n, line, v, path)
		return
	case t == limitType:
		d.decodeLimit(n, line, v, path)
		return
	case reflect.PointerTo(t).Implements(unmarshalerType):
		if err := n.Decode(v.Addr().Interface()); err != nil {
			msg := err.Error()
			if strings.HasPrefix(msg, "yaml: ") { // not our UnmarshalYAML's
				msg = fmt.Sprintf("%s cannot be read as %s", describe(n), describeType(t))
			}
			d.ps.addLine(line, path, "%s", msg)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := yamlFields(t)
		d.mapping(n, line, path, map[string]bool{}, func(k, val *yaml.Node, name string) {
			f, ok := fields[name]
			if !ok {
				d.ps.addLine(k.Line, "", "unknown key %s%s", quote(joinKey(path, name)), suggest(name, fields))
				return
			}
			d.lines[joinKey(path, name)] = k.Line
			d.value(val, v.FieldByIndex(f.Index), joinKey(path, name), f.Tag.Get("config"))
		})
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(t))
		}
		d.mapping(n, line, path, map[string]bool{}, func(k, val *yaml.Node, name string) {
			e := fresh(t.Elem())
			d.lines[joinKey(path, name)] = k.Line
			d.value(val, e, joinKey(path, name), "")
			v.SetMapIndex(reflect.ValueOf(name).Convert(t.Key()), e)
		})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.ps.addLine(line, path, "want a list, got %s", describe(n))
			return
		}
		list := reflect.MakeSlice(t, 0, len(n.Content))
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = e.Line
			if r := resolve(e); r == nil || isNull(r) {
				d.ps.addLine(e.Line, p, "empty list item")
				continue
			}
			ev := fresh(t.Elem())
			d.value(e, ev, p, "")
			list = reflect.Append(list, ev)
		}
		v.Set(list)
	default:
		d.scalar(n, line, v, path)
	}
}

// fresh returns a new settable value of type t: its WithDefaults() value
// when t has that method (a section's or a list item's defaults), else
// zero.
func fresh(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	if m := v.MethodByName("WithDefaults"); m.IsValid() && m.Type().NumIn() == 0 &&
		m.Type().NumOut() == 1 && m.Type().Out(0) == t {
		v.Set(m.Call(nil)[0])
	}
	return v
}

// mapping checks that n is a mapping, with plain keys each set once, and
// calls entry for each key and value. Merge keys (<<) are followed after
// the keys written in place; a key already set (in set) is skipped, so the
// first to set it wins.
func (d *decoder) mapping(n *yaml.Node, line int, path string, set map[string]bool, entry func(k, v *yaml.Node, name string)) {
	if n.Kind != yaml.MappingNode {
		if path == "" {
			d.ps.addLine(line, "", "want a mapping of keys at the top level, got %s", describe(n))
		} else {
			d.ps.addLine(line, path, "want a mapping of keys, got %s", describe(n))
		}
		return
	}
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.spend(k.Line) {
			return
		}
		name, ok := keyName(k)
		if !ok {
			d.ps.addLine(k.Line, path, "a key must be a plain name, got %s", describe(resolve(k)))
			continue
		}
		if prev, dup := seen[name]; dup {
			d.ps.addLine(k.Line, "", "key %s is set twice (also line %d)", quote(joinKey(path, name)), prev)
			continue
		}
		seen[name] = k.Line
		switch {
		case isMerge(k):
			merges = append(merges, v)
		case !set[name]:
			set[name] = true
			entry(k, v, name)
		}
	}
	for _, v := range merges {
		d.merge(v, line, path, set, entry)
	}
}

// merge follows a merge key's value: a mapping, or a list of mappings, whose
// keys count as if written in place (keys written in place win).
func (d *decoder) merge(v *yaml.Node, line int, path string, set map[string]bool, entry func(k, v *yaml.Node, name string)) {
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
			d.ps.addLine(v.Line, path, "a merge (<<) takes a mapping or a list of mappings")
			return
		}
		if d.merging[m] {
			d.ps.addLine(v.Line, path, "a merge (<<) refers to the mapping it is in")
			return
		}
		d.merging[m] = true
		d.mapping(m, line, path, set, entry)
		delete(d.merging, m)
	}
}

// scalar decodes a single value into a plain Go type with yaml.v3.
func (d *decoder) scalar(n *yaml.Node, line int, v reflect.Value, path string) {
	t := v.Type()
	if n.Kind != yaml.ScalarNode {
		d.ps.addLine(line, path, "want %s, got %s", describeType(t), describe(n))
		return
	}
	p := reflect.New(t)
	if err := n.Decode(p.Interface()); err == nil {
		v.Set(p.Elem())
		return
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		d.ps.addLine(line, path, "%s is not a duration (e.g. 30s, 5m)", quote(n.Value))
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		d.ps.addLine(line, path, "%s is not a whole number", quote(n.Value))
	case t.Kind() == reflect.Bool:
		d.ps.addLine(line, path, "%s is not true or false", quote(n.Value))
	default:
		d.ps.addLine(line, path, "%s cannot be read as %s", quote(n.Value), describeType(t))
	}
}

// size decodes a size in bytes into an int field: a whole number of bytes
// or one with a KiB, MiB or GiB suffix (65536, 64KiB, "1 MiB").
func (d *decoder) size(n *yaml.Node, line int, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.ps.addLine(line, path, "want a size (e.g. 64KiB), got %s", describe(n))
		return
	}
	s, ok := parseSize(n.Value)
	if !ok || v.OverflowInt(int64(s)) {
		d.ps.addLine(line, path, "%s is not a size (a number of bytes, or with a KiB, MiB or GiB suffix, e.g. 64KiB)", quote(n.Value))
		return
	}
	v.SetInt(int64(s))
}

// rate decodes N/PERIOD (ratelimit.ParseLimit: 60/m, 5/30s) into a
// ratelimit.Limit; an empty string is the zero Limit (none).
func (d *decoder) rate(n *yaml.Node, line int, v reflect.Value, path string) {
	var s string
	if n.Kind != yaml.ScalarNode || n.Decode(&s) != nil {
		d.ps.addLine(line, path, "want N/PERIOD (e.g. 60/m), got %s", describe(n))
		return
	}
	if strings.TrimSpace(s) == "" {
		v.SetZero()
		return
	}
	l, err := ratelimit.ParseLimit(s)
	if err != nil {
		d.ps.addLine(line, path, "%s", strings.TrimPrefix(err.Error(), ratelimit.ErrBadRate.Error()+" "))
		return
	}
	v.Set(reflect.ValueOf(l))
}

// limitFile is a creds.Limit as the file writes it (Credential.Limits).
type limitFile struct {
	Rate  ratelimit.Limit `yaml:"rate"`  // N/PERIOD of starts
	Burst *int            `yaml:"burst"` // makes Rate smooth
	Cost  ratelimit.Limit `yaml:"cost"`  // N/PERIOD of cost units
	Scope *string         `yaml:"scope"` // binds only items of this scope
}

// decodeLimit decodes a limit of a credential, {rate|cost: N/PERIOD,
// burst: B, scope: S}, into a creds.Limit: its keys as any mapping's
// (unknown keys, types and lines), then the limit they make, checked by
// creds.Limit.Validate. A problem names the key at fault.
func (d *decoder) decodeLimit(n *yaml.Node, line int, v reflect.Value, path string) {
	var f limitFile
	before := len(d.ps)
	d.value(n, reflect.ValueOf(&f).Elem(), path, "")
	if len(d.ps) > before {
		return
	}
	l, key, msg := f.limit()
	if msg != "" {
		if key != "" {
			path = joinKey(path, key)
		}
		d.ps.addLine(cmp.Or(d.lines.find(path), line), path, "%s", msg)
		return
	}
	v.Set(reflect.ValueOf(l))
}

// limit returns the limit f writes, or the key at fault ("" for the
// whole limit) and what is wrong.
func (f limitFile) limit() (l creds.Limit, key, msg string) {
	rate, cost := !f.Rate.IsZero(), !f.Cost.IsZero()
	switch {
	case rate && cost:
		return l, "", "a limit is either a rate or a cost, not both: give two limits"
	case !rate && !cost:
		return l, "", "give rate: N/PERIOD (starts) or cost: N/PERIOD (cost units), e.g. {rate: 500/m}"
	case cost && f.Burst != nil:
		return l, "burst", "applies to rate limits only"
	case rate:
		l = creds.RateLimit(f.Rate)
	default:
		l = creds.Limit{Kind: creds.LimitCost, N: int64(f.Cost.N), Period: f.Cost.Period}
	}
	if f.Burst != nil {
		if *f.Burst < 1 {
			return l, "burst", fmt.Sprintf("must be at least 1, got %d", *f.Burst)
		}
		l.Kind, l.Burst = creds.LimitSmooth, *f.Burst
	}
	if f.Scope != nil {
		if *f.Scope == "" {
			return l, "scope", "is empty; leave scope out for a limit on every start"
		}
		if err := creds.ValidScope(*f.Scope); err != nil {
			return l, "scope", err.Error()
		}
		l.Scope = *f.Scope
	}
	if err := l.Validate(); err != nil {
		return l, "", limitMsg(err)
	}
	return l, "", ""
}

// limitMsg is a creds.Limit.Validate error without its "creds: bad
// limit: " prefix (the key path says which limit).
func limitMsg(err error) string {
	return strings.TrimPrefix(err.Error(), creds.ErrBadLimit.Error()+": ")
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
// !!null that is not a null literal ("!!null x") is not null: yaml.v3
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

// isMerge reports whether k is the merge key <<, as yaml.v3 sees it.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" &&
		(k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// keyName decodes a mapping key as yaml.v3 does.
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

// yamlFields maps the yaml keys of struct type t to their fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		fields[name] = f
	}
	return fields
}

// suggest returns ` (did you mean "x"?)` for the known key closest to name,
// or "" if none is close.
func suggest(name string, fields map[string]reflect.StructField) string {
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
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "a whole number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return "a single value"
}
