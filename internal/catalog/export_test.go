package catalog

import "testing"

// Labelled is a labelled question, for the package's external tests.
type Labelled = labelled

// LoadQuestions, RecallAt5 and SharedIndex are the recall evaluation's
// helpers, for the tests that need the simulator (which imports this
// package).
func LoadQuestions(t testing.TB) map[string][]Labelled { return loadQuestions(t) }

func RecallAt5(t testing.TB, search func(q string, k int) ([]Hit, error), qs []Labelled) (float64, []string) {
	return recallAt5(t, search, qs)
}

func SharedIndex(t testing.TB) *Index { return newTestIndex(t) }
