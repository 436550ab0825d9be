package demo

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// KeywordPaths returns "<keyword> <path>" for each leaf of a 121 errInfo
// ("minimum Quantity", "pattern StockCode", "required CustomerID"), each
// once, in errInfo order: the failing keyword together with the property
// it failed on, which the envelope keeps as two separate lists.
func KeywordPaths(errInfo bson.Raw) []string {
	details, err := errInfo.LookupErr("details")
	if err != nil {
		return nil
	}
	d, ok := details.DocumentOK()
	if !ok {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	walkNode(d, "", add, 0)
	return out
}

func walkNode(node bson.Raw, path string, add func(string), depth int) {
	if depth > 64 {
		return
	}
	op, _ := node.Lookup("operatorName").StringValueOK()
	elems, err := node.Elements()
	if err != nil {
		return
	}
	leaf := true
	for _, e := range elems {
		arr, ok := e.Value().ArrayOK()
		if !ok {
			continue
		}
		vals, err := arr.Values()
		if err != nil {
			continue
		}
		switch e.Key() {
		case "missingProperties":
			for _, v := range vals {
				if s, ok := v.StringValueOK(); ok {
					add(op + " " + join(path, s))
				}
			}
			leaf = false
			continue
		case "propertiesNotSatisfied":
			for _, v := range vals {
				pd, ok := v.DocumentOK()
				if !ok {
					continue
				}
				name, _ := pd.Lookup("propertyName").StringValueOK()
				if det, ok := pd.Lookup("details").ArrayOK(); ok {
					dv, _ := det.Values()
					for _, x := range dv {
						if xd, ok := x.DocumentOK(); ok {
							walkNode(xd, join(path, name), add, depth+1)
						}
					}
				}
			}
			leaf = false
			continue
		}
		for _, v := range vals {
			if xd, ok := v.DocumentOK(); ok {
				if _, err := xd.LookupErr("operatorName"); err == nil {
					walkNode(xd, path, add, depth+1)
					leaf = false
				}
			}
		}
	}
	if leaf && op != "" {
		add(strings.TrimSpace(op + " " + path))
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
