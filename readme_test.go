package writeguard_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var updateReadme = flag.Bool("update", false, "rewrite the checked command blocks of README.md from the commands' output")

// snippetImports are the packages a README snippet that is not a whole
// file may use, by the name it uses them under.
var snippetImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "log": "log", "os": "os", "time": "time",
	"bson": "go.mongodb.org/mongo-driver/v2/bson", "mongo": "go.mongodb.org/mongo-driver/v2/mongo",
	"options":    "go.mongodb.org/mongo-driver/v2/mongo/options",
	"writeguard": "github.com/writeguard/writeguard", "envelope": "github.com/writeguard/writeguard/envelope",
	"dlq":      "github.com/writeguard/writeguard/dlq",
	"otelhook": "github.com/writeguard/writeguard/otelhook", "hooks": "github.com/writeguard/writeguard/hooks",
	"policy": "github.com/writeguard/writeguard/policy",
}

// TestReadmeGoSnippets compiles every Go snippet of README.md as it
// stands, each as the file of a package main of its own: a snippet that
// is a whole file ("package main" ...) as written; a snippet of top-level
// declarations with the package clause, the imports of the packages it
// names (snippetImports) and, when it has none, an empty func main added.
// Nothing is added inside a function, so an unused variable or import, a
// statement outside a function or a wrong signature fails the build.
func TestReadmeGoSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("the README's Go snippets are built with the go command: skipped in -short mode")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)\n```go\n(.*?)```\n").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 2 {
		t.Fatalf("README.md has %d Go snippets, want the usage and the Remaining ones at least", len(blocks))
	}
	// A directory inside the module, which go test ./... does not walk
	// (testdata).
	dir, err := os.MkdirTemp("testdata", "readme-snippets-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var pkgs []string
	for i, b := range blocks {
		src := b[1]
		if !strings.HasPrefix(src, "package ") {
			if !regexp.MustCompile(`^(//.*\n)*(func|type|var|const) `).MatchString(src) {
				t.Errorf("README Go snippet %d is neither a file nor top-level declarations (statements belong in a function):\n%s", i+1, src)
				continue
			}
			src = "package main\n\n" + importsOf(src) + src
			if !strings.Contains(src, "\nfunc main()") {
				src += "\nfunc main() {}\n"
			}
		}
		pkg := filepath.Join(dir, fmt.Sprintf("snippet%d", i+1))
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+pkg)
	}
	for _, pkg := range pkgs {
		out, err := exec.Command("go", "vet", pkg).CombinedOutput()
		if err != nil {
			src, _ := os.ReadFile(filepath.Join(pkg, "main.go"))
			t.Errorf("README Go snippet %s does not compile as written: %v\n%s\n--- as compiled:\n%s", filepath.Base(pkg), err, out, src)
		}
	}
}

// importsOf returns the import declaration of the snippetImports src
// names ("pkg.").
func importsOf(src string) string {
	var paths []string
	for name, path := range snippetImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(src) {
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return ""
	}
	sort.Strings(paths)
	return "import (\n\t\"" + strings.Join(paths, "\"\n\t\"") + "\"\n)\n\n"
}

// TestReadmeFigures runs the commands of README.md's checked block (a
// fenced block after "<!-- checked: commands -->": lines "$ command", each
// followed by its output) with sh from the repository's root and compares
// their output: the module counts of "Binary size" are what the commands
// give now. -update rewrites the block.
func TestReadmeFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("the README's figures are computed with the go command: skipped in -short mode")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh: the README's checked commands are skipped")
	}
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	const marker = "<!-- checked: commands -->"
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == marker && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "```") {
			start = i + 2
		}
	}
	if start < 0 {
		t.Fatalf("README.md has no %s block", marker)
	}
	end := start
	for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
		end++
	}
	var want, got []string
	for _, l := range lines[start:end] {
		cmd, ok := strings.CutPrefix(l, "$ ")
		if !ok {
			want = append(want, l)
			continue
		}
		want = append(want, l)
		got = append(got, l)
		out, err := exec.Command("sh", "-c", cmd).Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		got = append(got, strings.Split(strings.TrimRight(string(out), "\n"), "\n")...)
	}
	// want holds the block's lines in order; got the commands and outputs.
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	if *updateReadme {
		out := append(append(append([]string{}, lines[:start]...), got...), lines[end:]...)
		if err := os.WriteFile("README.md", []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's checked figures drifted; run 'go test -run TestReadmeFigures -update':\n--- README\n%s\n--- now\n%s",
		strings.Join(want, "\n"), strings.Join(got, "\n"))
}
