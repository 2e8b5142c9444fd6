// Package sdkcheck proves the strict fakeapi faithful to the providers'
// official SDKs: its test starts a strict OpenAI and a strict Anthropic
// server and runs check.mjs, which drives them with the openai and
// @anthropic-ai/sdk npm packages pinned in package.json.
//
// The packages must be installed first:
//
//	npm ci --prefix internal/fakeapi/sdkcheck
//
// The test fails (it never skips) when node or the packages are missing.
package sdkcheck
