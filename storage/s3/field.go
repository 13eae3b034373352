package s3

import (
	"errors"
	"fmt"
)

// Field is a setting of Config that an error is about: the one that is
// wrong, or the one that mends or explains it. A caller that knows the
// setting by another name (a flag, an environment variable) names it
// itself; this package's messages name the Config field.
type Field string

// The fields of a FieldError.
const (
	FieldEndpoint        Field = "Endpoint"
	FieldBucketLookup    Field = "BucketLookup"
	FieldCAFile          Field = "CAFile"
	FieldCreateBucket    Field = "CreateBucket"
	FieldCredentials     Field = "AccessKey and SecretKey"
	FieldConnectTimeout  Field = "ConnectTimeout"
	FieldResponseTimeout Field = "ResponseTimeout"
	FieldStallTimeout    Field = "StallTimeout"
)

// Fix is what a FieldError asks of its field.
type Fix int

const (
	// FixValue: the field's value is not valid (Err says why).
	FixValue Fix = iota
	// FixCheck: the field may be wrong; check it (and the server).
	FixCheck
	// FixSet: setting the field (to Value, where given) mends it.
	FixSet
)

// ErrNoPEM is the Err of a FieldError of FieldCAFile whose file holds no
// PEM certificate.
var ErrNoPEM = errors.New("holds no PEM certificates")

// FieldError is an error that one of Config's settings explains or mends:
// Err says what is wrong, naming no setting, and Fix what to do with
// Field. Value is the setting's value where the message shows it (never a
// secret). Storage's classification of Err (storage.Permanent, a net.Error)
// is kept by the caller's wrapping.
type FieldError struct {
	Field Field
	Fix   Fix
	Value string
	Err   error
}

func (e *FieldError) Error() string {
	switch e.Fix {
	case FixCheck:
		return fmt.Sprintf("%v; check %s", e.Err, e.Field)
	case FixSet:
		switch {
		case e.Field == FieldCreateBucket:
			return fmt.Sprintf("%v; create it or set %s", e.Err, e.Field)
		case e.Value != "":
			return fmt.Sprintf("%v; set %s to %s", e.Err, e.Field, e.Value)
		}
		return fmt.Sprintf("%v; set %s", e.Err, e.Field)
	}
	if e.Value == "" {
		return fmt.Sprintf("s3: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("s3: %s %q %v", e.Field, e.Value, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }
