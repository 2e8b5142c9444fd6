package config

// Parse exposes the decode path to the black-box tests and the fuzzers.
var Parse = parse
