// Package webhooks verifies Device Hub webhook deliveries. Go 1.19 or later, standard library
// only: copy this file, or point a replace directive at this folder.
//
// A delivery is signed as the hub's processors/delivery/signing.ts signs it: Webhook-Signature
// holds "v1,<hex>" entries separated by whitespace (two during a secret rotation), each the hex
// HMAC-SHA256 of "{Webhook-Id}.{Webhook-Timestamp}.{raw body}" keyed with the bytes of a
// subscription's secret ("whsec_" included). The checks, their order and the refusal reasons are
// the same as the TypeScript and Python receivers', and tested against the same vectors
// (test/fixtures/webhook-vectors.json).
//
//	body, _ := io.ReadAll(r.Body)
//	if err := webhooks.Verify(body, r.Header, []string{secret}); err != nil {
//		var refused *webhooks.Error
//		errors.As(err, &refused) // refused.Reason is one of the Reason constants
//		w.WriteHeader(http.StatusBadRequest)
//		return
//	}
//	// json.Unmarshal(body, &event): the body is the Event resource.
package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a delivery's timestamp may be from the receiver's clock, either way.
const DefaultTolerance = 300 * time.Second

// Reason names why a delivery is refused.
type Reason string

// The refusal reasons, in the order the checks run: the first that fails names the refusal.
const (
	// NoSecret: no secret to verify with, or an empty one (a blank setting would let anyone sign).
	NoSecret Reason = "no_secret"
	// MissingHeader: Webhook-Id, Webhook-Timestamp or Webhook-Signature is absent or empty.
	MissingHeader Reason = "missing_header"
	// MalformedTimestamp: Webhook-Timestamp is not 1 to 12 ASCII digits (Unix seconds).
	MalformedTimestamp Reason = "malformed_timestamp"
	// TimestampTooOld: more than the tolerance before now: a replay, or a clock far off.
	TimestampTooOld Reason = "timestamp_too_old"
	// TimestampTooNew: more than the tolerance after now: a clock far off.
	TimestampTooNew Reason = "timestamp_too_new"
	// MalformedSignature: Webhook-Signature has no entry of the shape v1,<64 lower-case hex digits>.
	MalformedSignature Reason = "malformed_signature"
	// NoMatchingSignature: no v1 entry is the signature of this id, timestamp and body with any secret.
	NoMatchingSignature Reason = "no_matching_signature"
)

// Error is a delivery refused, and why.
type Error struct{ Reason Reason }

func (e *Error) Error() string { return "webhook refused: " + string(e.Reason) }

var (
	timestampPattern = regexp.MustCompile(`^[0-9]{1,12}$`)
	entryPattern     = regexp.MustCompile(`^v1,([0-9a-f]{64})$`)
)

// Verify checks a delivery against the receiver's clock and DefaultTolerance. body is the raw body
// as received, never JSON decoded and encoded again; secrets are those the receiver accepts (during
// a rotation, the new and the old one). It returns nil or an *Error.
func Verify(body []byte, header http.Header, secrets []string) error {
	return VerifyAt(body, header, secrets, time.Now(), DefaultTolerance)
}

// VerifyAt is Verify with the receiver's clock and the tolerance given.
func VerifyAt(body []byte, header http.Header, secrets []string, now time.Time, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return &Error{NoSecret}
	}
	for _, s := range secrets {
		if s == "" {
			return &Error{NoSecret}
		}
	}
	// http.Header.Get matches names in any case when they were set through Set or by net/http.
	id := header.Get("Webhook-Id")
	timestamp := header.Get("Webhook-Timestamp")
	signatures := header.Get("Webhook-Signature")
	if id == "" || timestamp == "" || signatures == "" {
		return &Error{MissingHeader}
	}
	if !timestampPattern.MatchString(timestamp) {
		return &Error{MalformedTimestamp}
	}
	sent, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return &Error{MalformedTimestamp}
	}
	seconds := int64(tolerance / time.Second)
	if now.Unix()-sent > seconds {
		return &Error{TimestampTooOld}
	}
	if sent-now.Unix() > seconds {
		return &Error{TimestampTooNew}
	}
	var given [][]byte
	for _, entry := range strings.Fields(signatures) {
		if m := entryPattern.FindStringSubmatch(entry); m != nil {
			sum, _ := hex.DecodeString(m[1])
			given = append(given, sum)
		}
	}
	if len(given) == 0 {
		return &Error{MalformedSignature}
	}
	// The signed text holds the timestamp as a number (as the hub formats it), not the header's text.
	signed := append([]byte(id+"."+strconv.FormatInt(sent, 10)+"."), body...)
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(signed)
		expected := mac.Sum(nil)
		for _, g := range given {
			if hmac.Equal(g, expected) {
				return nil
			}
		}
	}
	return &Error{NoMatchingSignature}
}
