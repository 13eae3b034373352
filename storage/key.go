package storage

import (
	"fmt"
	"strings"
)

// CheckKey returns an error wrapping ErrInvalidKey unless key is a
// non-empty, relative, slash-separated path without empty, "." or ".."
// segments and without NUL or backslash bytes. Every backend calls it first,
// so a key can never escape a store's root or prefix.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("key is empty: %w", ErrInvalidKey)
	}
	if strings.ContainsAny(key, "\x00\\") {
		return fmt.Errorf("key %q contains a NUL or backslash: %w", key, ErrInvalidKey)
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("key %q is absolute: %w", key, ErrInvalidKey)
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "", ".", "..":
			return fmt.Errorf("key %q has an empty, \".\" or \"..\" segment: %w", key, ErrInvalidKey)
		}
	}
	return nil
}
