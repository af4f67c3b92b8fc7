//go:build race

package objectstore

const raceEnabled = true
