package fakeapi

// SetBoundsForTest lowers the batch bounds (OpenAI lines and input file
// bytes, Anthropic requests and body bytes) for a test that does not run in
// parallel; restore puts them back.
func SetBoundsForTest(openaiLines int, openaiFile int64, anthropicRequests int, anthropicBody int64) (restore func()) {
	l, f, r, b := maxOpenAIBatchLines, maxBatchFile, maxAnthropicBatchRequests, maxMessageBatch
	maxOpenAIBatchLines, maxBatchFile, maxAnthropicBatchRequests, maxMessageBatch = openaiLines, openaiFile, anthropicRequests, anthropicBody
	return func() {
		maxOpenAIBatchLines, maxBatchFile, maxAnthropicBatchRequests, maxMessageBatch = l, f, r, b
	}
}
