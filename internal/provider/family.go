package provider

// Family names the request format a provider reads: a request written
// for one provider of a family reads the same on every other of it, so
// an item may move between kinds of one family (jobs.kinds.<name>.
// fallback). OpenAI and OpenAI-compatible servers read OpenAI's requests;
// Anthropic reads its own. "" for a name that is not a provider.
func Family(name string) string {
	switch name {
	case OpenAI, OpenAICompatible:
		return OpenAI
	case Anthropic:
		return Anthropic
	}
	return ""
}
