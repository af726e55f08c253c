package config

import (
	"strings"

	"github.com/agnivade/levenshtein"
)

// nearest is the candidate closest to name by edit distance (letter case aside), if one is
// close enough to be the name that was meant: at most a third of name's length away (one
// edit for short names). Ties go to the earlier candidate, so a message is the same every run.
func nearest(name string, candidates []string) (string, bool) {
	limit := max(1, len(name)/3)
	best, bestDist := "", limit+1
	lower := strings.ToLower(name)
	for _, c := range candidates {
		if d := levenshtein.ComputeDistance(lower, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, bestDist <= limit
}

// nearestWithin is nearest, or with exact only a candidate that is name but for letter case.
func nearestWithin(name string, candidates []string, exact bool) (string, bool) {
	if !exact {
		return nearest(name, candidates)
	}
	for _, c := range candidates {
		if strings.EqualFold(c, name) {
			return c, true
		}
	}
	return "", false
}

// didYouMean is the tail of an error that names what was probably meant; "" without a guess.
func didYouMean(guess string, ok bool) string {
	if !ok {
		return ""
	}
	return "; did you mean " + guess + "?"
}
