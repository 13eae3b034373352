// Package s3 is the S3 backend of storage.Store, on minio-go. It talks to AWS
// S3, MinIO and other S3-compatible servers.
//
// Integrity: every object's SHA-256 is computed once, while its bytes are
// read, and returned in ObjectInfo.SHA256; and every request body carries a
// checksum the server verifies it against before it stores anything. Objects
// up to Config.PartSize go up in one PUT with a CRC32C of the same pass over
// the bytes as their SHA-256, as x-amz-checksum-crc32c: computed here
// (storage.Checksums), or given by the caller with the SHA-256
// (PutOptions.CRC32C, as the checkpoint uploader does). It guards the transfer
// of exactly the bytes the SHA-256 was computed on, and costs the server far
// less than checking a SHA-256 (about a sixth of MinIO's CPU on a single PUT).
// A caller that gave only the SHA-256 has it travel as x-amz-checksum-sha256,
// so the server checks the stored bytes have exactly that digest. Larger
// objects go up as parallel multipart parts, each guarded by a CRC32C the
// server verifies; the object's SHA-256 is computed on the stream and checked
// against PutOptions.SHA256 before the upload is completed, because S3 has no
// full-object SHA-256 for multipart uploads. Payloads are sent as
// UNSIGNED-PAYLOAD, so neither minio-go (v4 payload signing) nor the server
// hashes them a second time. The SHA-256 is stored as user metadata. A failed
// or cancelled Put aborts its multipart upload; the upload of a Put whose
// process was killed stays open until Sweep aborts it (storage.Sweeper).
// Create-only Puts send
// If-None-Match: * on the PUT or on CompleteMultipartUpload.
//
// Memory: a Put reads its object into part buffers of Config.PartSize, at
// most Config.Parallelism+1 of them, so memory does not grow with the
// object. One exception copies nothing: a single-PUT object whose caller
// gave its SHA-256 and passed an in-memory reader that can be read at an
// offset (a bytes.Reader, as the checkpoint uploader does) is sent straight
// from the caller's memory.
//
// Timeouts: every request has three clocks, Config.ConnectTimeout (TCP
// connect and TLS handshake), Config.ResponseTimeout (the response's
// headers, counted from when the request, body included, has been sent, so
// an upload that is still sending is never cut) and Config.StallTimeout (a
// read or write that moves no byte). A request that runs out of one ends
// its whole call at once with a *TimeoutError that names the endpoint and
// the setting to raise (Phase.Field), a net.Error whose Timeout is true,
// not marked permanent:
// minio-go's own ten retries, each waiting as long again, would hide a
// black-holed endpoint for minutes; the caller's retries decide instead.
// Opening the store also gives up once ConnectTimeout+ResponseTimeout have
// passed, so a server that accepts connections and never answers fails New
// within ResponseTimeout, one that never accepts them within
// ConnectTimeout.
//
// Errors that a setting explains or mends (a missing bucket, an endpoint
// that cannot be reached, an untrusted certificate, refused credentials)
// are a *FieldError naming the Config field; the caller names it as its
// users know it (a flag, a variable).
//
// Retries: minio-go sends a request again after a transient failure (a
// reset connection, HTTP 503), up to ten times by default. A store wrapped
// in storage.Retry should set Config.RequestAttempts to 1, so that one
// policy, the wrapper's, decides; the wrapper also resumes a Get's body
// where a failed read left off, which minio-go does not.
//
// Stat reports the SHA-256 where it was known when the upload began (every
// single-PUT object, and multipart objects whose caller passed it); List
// does not report it.
package s3
