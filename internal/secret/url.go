package secret

import "strings"

// RedactURL hides any password or token in a server URL, or in a
// comma-separated list of URLs ("nats://u:p@h1,nats://u:p@h2") or of hosts
// ("redis://:p@h1,h2/0"). It reads the text rather than a parsed URL, so
// that a password holding ',' or something net/url refuses (a bad
// %-escape, a space, an unencoded '/') is hidden all the same: in each
// URL, what stands between "://" and its last '@' is taken for the user
// information; a user name is kept, a password or token is replaced.
func RedactURL(raw string) string {
	if !strings.Contains(raw, "://") {
		// No scheme ("user:pw@host:6379"): everything before the last '@'
		// ahead of the path is user information.
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			return "REDACTED" + raw[at:]
		}
		return raw
	}
	var b strings.Builder
	rest := raw
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i+len("://")])
		rest = rest[i+len("://"):]
		authority := rest
		if j := strings.Index(authority, "://"); j >= 0 {
			authority = authority[:j] // the next URL of a list starts there
		}
		at := userinfoEnd(authority)
		if at < 0 {
			continue
		}
		if user, _, hasPassword := strings.Cut(authority[:at], ":"); hasPassword {
			b.WriteString(user + ":REDACTED")
		} else {
			b.WriteString("REDACTED") // a NATS token
		}
		rest = rest[at:]
	}
}

// userinfoEnd returns the index of the '@' that ends the user information
// of one URL (without its scheme), or -1. Normally it is the last '@'
// before the path; when there is none there, a password may hold an
// unencoded '/', '?' or '#', so the URL's last '@' counts if what follows
// it looks like a host (a port, or a path after it) rather than, say, a
// query value like "?client_name=a@b".
func userinfoEnd(u string) int {
	authority := u
	if j := strings.IndexAny(u, "/?#"); j >= 0 {
		authority = u[:j]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		return at
	}
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return -1
	}
	if strings.ContainsAny(u[at+1:], ":/?#") {
		return at
	}
	return -1
}
