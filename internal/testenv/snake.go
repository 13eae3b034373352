package testenv

import (
	"encoding/json"
	"regexp"
	"testing"
)

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// AssertSnakeCase fails t for every object key of the JSON document data,
// at any depth, that is not snake_case, naming its path.
func AssertSnakeCase(t testing.TB, data []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	keys := map[string]string{}
	jsonKeys(v, "", keys)
	for path, k := range keys {
		if !snakeKey.MatchString(k) {
			t.Errorf("JSON key %s is not snake_case", path)
		}
	}
}

// jsonKeys adds every object key in v, at any depth, with its path.
func jsonKeys(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out[path+"."+k] = k
			jsonKeys(e, path+"."+k, out)
		}
	case []any:
		for _, e := range x {
			jsonKeys(e, path+"[]", out)
		}
	}
}
