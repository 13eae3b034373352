package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/lifeboat-project/lifeboat/internal/printable"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// The libraries' errors name the settings of their configuration
// (s3.FieldError, s3.TimeoutError, storage.ErrCredentialsInURL); here they
// become sentences naming the flags and variables users set them with.
// Such an error can surface anywhere a store is used (an upload's failure
// is logged by the agent, a restore's ends the command), so the naming is
// done where text leaves lifeboat: printError, the logger (logValue) and
// storeOptions.open's error. The text of an error that wraps one keeps
// everything else: the field error's own text is replaced in it.

// storeEndpoint, storeCAFile and storeCredentials are how the store's
// settings are named in sentences.
const (
	storeEndpoint    = "--s3-endpoint (AWS_ENDPOINT_URL)"
	storeCAFile      = "AWS_CA_BUNDLE (--s3-ca-file)"
	storeCredentials = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)

// timeoutFlags names the flags of the S3 client's clocks.
var timeoutFlags = map[s3.Field]string{
	s3.FieldConnectTimeout:  "s3-connect-timeout",
	s3.FieldResponseTimeout: "s3-response-timeout",
	s3.FieldStallTimeout:    "s3-stall-timeout",
}

// fieldSentence is the sentence for one library error that names a
// setting, naming its flag and variable instead; ok is false for any
// other error.
func fieldSentence(err error) (string, bool) {
	switch e := err.(type) {
	case *s3.FieldError:
		return s3Sentence(e), true
	case *s3.TimeoutError:
		return timeoutSentence(e), true
	}
	if err == storage.ErrCredentialsInURL {
		return "credentials do not belong in the URL; use " + storeCredentials, true
	}
	return "", false
}

// s3Sentence names the flag and variable of an s3.FieldError's setting.
func s3Sentence(e *s3.FieldError) string {
	switch e.Fix {
	case s3.FixCheck:
		switch e.Field {
		case s3.FieldEndpoint:
			return fmt.Sprintf("%v; check %s and that the server is running", e.Err, storeEndpoint)
		case s3.FieldCAFile:
			return fmt.Sprintf("%v; check the endpoint's scheme and %s", e.Err, storeCAFile)
		case s3.FieldCredentials:
			return fmt.Sprintf("%v; check %s (or the credentials file, or the IAM role)", e.Err, storeCredentials)
		}
	case s3.FixSet:
		switch e.Field {
		case s3.FieldEndpoint:
			return fmt.Sprintf("%v; set the endpoint with --s3-endpoint or AWS_ENDPOINT_URL", e.Err)
		case s3.FieldCAFile:
			return fmt.Sprintf("%v; set %s to %s", e.Err, storeCAFile, e.Value)
		case s3.FieldCreateBucket:
			return fmt.Sprintf("%v; create it or set --create-bucket", e.Err)
		case s3.FieldBucketLookup:
			return fmt.Sprintf("%v; set --s3-bucket-lookup %s (LIFEBOAT_S3_BUCKET_LOOKUP=%[2]s)", e.Err, e.Value)
		}
	case s3.FixValue:
		switch e.Field {
		case s3.FieldEndpoint:
			return fmt.Sprintf("the endpoint %q (--s3-endpoint, AWS_ENDPOINT_URL) %v", e.Value, e.Err)
		case s3.FieldBucketLookup:
			return fmt.Sprintf("the bucket lookup %q (--s3-bucket-lookup) %v", e.Value, e.Err)
		case s3.FieldCredentials:
			return "give both the access key and the secret key (" + storeCredentials + "), or neither to use AWS_ACCESS_KEY_ID, the credentials file or IAM"
		case s3.FieldCAFile:
			if errors.Is(e.Err, s3.ErrNoPEM) {
				return fmt.Sprintf("s3: CA file %s (--s3-ca-file, AWS_CA_BUNDLE) %v", e.Value, e.Err)
			}
			return fmt.Sprintf("s3: read CA file (--s3-ca-file, AWS_CA_BUNDLE): %v", e.Err)
		case s3.FieldConnectTimeout, s3.FieldResponseTimeout, s3.FieldStallTimeout:
			return fmt.Sprintf("the timeout %s (--%s) %v", e.Value, timeoutFlags[e.Field], e.Err)
		}
	}
	return e.Error() // a field this table does not know: the library's own words
}

// timeoutSentence names the flags and variables of an s3.TimeoutError.
func timeoutSentence(e *s3.TimeoutError) string {
	raise := "--" + timeoutFlags[e.Phase.Field()]
	raise += " (" + envName(timeoutFlags[e.Phase.Field()]) + ")"
	check := "check " + storeEndpoint
	switch e.Phase {
	case s3.PhaseConnect:
		return fmt.Sprintf("%s; %s and that the server is running and reachable, or raise %s", e.Problem(), check, raise)
	case s3.PhaseTLS:
		return fmt.Sprintf("%s; %s, its scheme and port, or raise %s", e.Problem(), check, raise)
	case s3.PhaseStall:
		return fmt.Sprintf("%s; %s and the network path to it, or raise %s", e.Problem(), check, raise)
	case s3.PhaseOpen:
		return fmt.Sprintf("%s (--s3-connect-timeout plus --s3-response-timeout); %s and the server's health, or raise %s", e.Problem(), check, raise)
	}
	return fmt.Sprintf("%s; %s and the server's health, or raise %s", e.Problem(), check, raise)
}

// fieldErrors calls f with each error in err's tree (errors.Unwrap and
// errors.Join's) that fieldSentence names, outermost first, and does not
// descend into those.
func fieldErrors(err error, f func(e error, sentence string)) {
	if err == nil {
		return
	}
	if s, ok := fieldSentence(err); ok {
		f(err, s)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		fieldErrors(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			fieldErrors(e, f)
		}
	}
}

// namedText is text (err's message, or a line of it) with the text of each
// library field error in err replaced by its sentence; escape is applied
// to both first (printable.String for a printed line).
func namedText(text string, err error, escape func(string) string) string {
	fieldErrors(err, func(e error, sentence string) {
		text = strings.ReplaceAll(text, escape(e.Error()), escape(sentence))
	})
	return text
}

// namedError is an error whose text names flags and variables where the
// error it wraps names a library's settings.
type namedError struct {
	msg string
	err error
}

func (e *namedError) Error() string { return e.msg }
func (e *namedError) Unwrap() error { return e.err }

// named returns err with its text naming flags and variables in place of a
// library's settings (namedText); err itself when it names none. The
// errors it wraps stay as they were, for errors.Is and errors.As.
func named(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if text := namedText(msg, err, func(s string) string { return s }); text != msg {
		return &namedError{msg: text, err: err}
	}
	return err
}

// namedLines is printable.ErrorLines(err) with the library settings in
// each line named as flags and variables.
func namedLines(err error) []string {
	lines := printable.ErrorLines(err)
	for i, l := range lines {
		lines[i] = namedText(l, err, printable.String)
	}
	return lines
}

// settingFlags is how the settings that libraries' texts name
// (setting.Name: a hint, a reason, a verdict) are named to users: by the
// flag, in the words the messages had when the libraries named flags
// themselves.
var settingFlags = map[setting.Name]string{
	setting.Dir:                       "--dir",
	setting.Settle:                    "--settle",
	setting.Exclude:                   "--exclude",
	setting.MarkerOnly:                "--marker-only",
	setting.Grace:                     "--grace",
	setting.FlushWait:                 "--flush-wait",
	setting.Rank:                      "--rank, LIFEBOAT_RANK, " + strings.Join(rankVars, ", "),
	setting.WorldSize:                 "--world-size",
	setting.Restore:                   "--restore",
	setting.AllRanks:                  "--restore-ranks",
	setting.UnsafeNoConditionalWrites: "--s3-unsafe-no-conditional-writes (LIFEBOAT_S3_UNSAFE_NO_CONDITIONAL_WRITES)",
}

// settingFlag names n as users set it: its flag (settingFlags), or the
// library's name of it where the table has none.
func settingFlag(n setting.Name) string {
	if f, ok := settingFlags[n]; ok {
		return f
	}
	return string(n)
}

// logValue is the logger's ReplaceAttr: an error value that names a
// library's setting is logged with the flag's sentence instead, and a
// setting.Text with its settings named as flags (settingFlag).
func logValue(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindAny {
		return a
	}
	if t, ok := a.Value.Any().(setting.Text); ok {
		a.Value = slog.StringValue(t.Render(settingFlag))
		return a
	}
	if err, ok := a.Value.Any().(error); ok {
		if n := named(err); n != err {
			a.Value = slog.StringValue(n.Error())
		}
	}
	return a
}
