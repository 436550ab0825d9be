package engine

import (
	"reflect"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// idFreeTypes caches idFree per reflect.Type.
var idFreeTypes sync.Map // reflect.Type → bool

var (
	marshalerType      = reflect.TypeFor[bson.Marshaler]()
	valueMarshalerType = reflect.TypeFor[bson.ValueMarshaler]()
)

// idFree reports whether the default registry's struct codec (no options,
// no custom registry: the default encoder pool) can write no _id key for
// a value of type t, so that the arena need not look for one in its
// bytes: t is a struct (or a pointer to one) that is no bson.Marshaler or
// ValueMarshaler, and no field's bson key is "_id", no field is
// embedded (inlined or a subdocument depending on its tags), and every
// field inlined by its tag is such a struct itself (an inline map may hold
// any key). A Go field name is never "_id" once lowercased (an exported
// name starts with a capital letter). Any doubt answers false: the arena
// then looks, as before.
func idFree(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if v, ok := idFreeTypes.Load(t); ok {
		return v.(bool)
	}
	free := structIDFree(t, 0)
	idFreeTypes.Store(t, free)
	return free
}

func structIDFree(t reflect.Type, depth int) bool {
	for t.Kind() == reflect.Pointer {
		if marshals(t) {
			return false
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || depth > 8 || marshals(t) {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts := bsonTag(f.Tag)
		switch {
		case f.Anonymous, name == "_id":
			return false
		case !f.IsExported():
			continue // the codec skips it
		case strings.Contains(opts, "inline") && !structIDFree(f.Type, depth+1):
			return false
		}
	}
	return true
}

// bsonTag returns the key and the options of a field's bson tag, as the
// default struct tag parser reads it: the "bson" key, or the whole tag
// when it has no key at all (the legacy form).
func bsonTag(tag reflect.StructTag) (name, opts string) {
	v, ok := tag.Lookup("bson")
	if !ok && !strings.Contains(string(tag), ":") {
		v = string(tag)
	}
	name, opts, _ = strings.Cut(v, ",")
	return name, opts
}

func marshals(t reflect.Type) bool {
	return t.Implements(marshalerType) || t.Implements(valueMarshalerType) ||
		reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(valueMarshalerType)
}
