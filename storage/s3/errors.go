package s3

import (
	"net/http"
	"slices"

	"github.com/minio/minio-go/v7"
)

// What a server's error answer means, whatever server it is: S3 codes
// come from AWS, MinIO, Ceph RGW, versitygw and SeaweedFS alike, and the
// same fault arrives with different statuses (versitygw refuses an
// unknown access key with 404).
type errorKind int

const (
	kindOther       errorKind = iota
	kindCredentials           // the keys or token are wrong or expired
	kindDenied                // the keys are known but not allowed
	kindNoBucket              // the bucket does not exist
	kindAddressing            // the request reached no bucket: wrong addressing style
	kindFull                  // the server is out of space or over a quota
	kindServer                // a fault on the server's side (HTTP 5xx)
)

var (
	credentialCodes = []string{"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
		"InvalidClientTokenId", "XAdminUserNotFound", "AuthorizationHeaderMalformed"}
	deniedCodes = []string{"AccessDenied", "AllAccessDisabled"}
	fullCodes   = []string{"XMinioStorageFull", "QuotaExceeded", "InsufficientStorage"}
)

// classifyAnswer reads a server's error answer.
func classifyAnswer(resp minio.ErrorResponse) errorKind {
	switch {
	case slices.Contains(credentialCodes, resp.Code):
		return kindCredentials
	case slices.Contains(deniedCodes, resp.Code):
		return kindDenied
	case resp.Code == "NoSuchBucket":
		return kindNoBucket
	case resp.Code == "MethodNotAllowed" || resp.StatusCode == http.StatusMethodNotAllowed:
		return kindAddressing
	case slices.Contains(fullCodes, resp.Code) || resp.StatusCode == http.StatusInsufficientStorage:
		return kindFull
	case resp.StatusCode >= 500:
		return kindServer
	}
	return kindOther
}
