//go:build race

package transport

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts mean nothing under it.
const raceEnabled = true
