//go:build race

// phobos: whether the race detector is on, for the tests it makes too
// slow. Under the Mozilla Public License 2.0 (LICENSE).

package yamux

const raceEnabled = true
