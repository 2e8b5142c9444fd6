package config

import "reflect"

// Parse exposes the decode path to the black-box tests and the fuzzer.
var Parse = parse

// RawType is the decoding target's type, for the key-coverage test.
var RawType = reflect.TypeFor[rawConfig]()
