package embedded_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocCostPointsAtReadme (trial finding C1): the package doc's "Cost"
// section gives no module count or binary size of its own (it said 125
// modules, 59 compiled, 48 MB while README.md's checked block said
// 170/64): it points at README.md's "Binary size" figures, which
// TestReadmeFigures keeps true.
func TestDocCostPointsAtReadme(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	cost := doc[strings.Index(doc, "# Cost"):]
	cost = cost[:strings.Index(cost, "# What it is not")]
	if !strings.Contains(cost, `"Binary size"`) || !strings.Contains(cost, "TestReadmeFigures") {
		t.Errorf("the Cost section does not point at README.md's checked figures:\n%s", cost)
	}
	if m := regexp.MustCompile(`\d+ (modules|MB)|\d+ of them`).FindString(cost); m != "" {
		t.Errorf("the Cost section hard-codes a figure (%q), which goes stale:\n%s", m, cost)
	}
}
