package config

// Parse exposes the decode path to the black-box tests and the fuzzers.
var Parse = parse

// LimitFile is a credential's limit as the file writes it (its keys).
type LimitFile = limitFile
