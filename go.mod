module github.com/phobos-project/phobos

go 1.26

require (
	github.com/fxamacker/cbor/v2 v2.9.6
	github.com/twmb/murmur3 v1.2.2
)

require github.com/x448/float16 v0.8.4 // indirect
