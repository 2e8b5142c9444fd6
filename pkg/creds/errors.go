package creds

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrPoolEmpty: the pool holds no credential (none registered, or none
	// of those this Pool may use). Redis losing its state leads here too:
	// register the credentials again.
	ErrPoolEmpty = errors.New("creds: pool has no credentials")
	// ErrNoneAvailable: TryAcquire found no usable credential. The error is
	// an *UnavailableError that says when to try again.
	ErrNoneAvailable = errors.New("creds: no credential available")
	// ErrNoSuchCredential: the credential ID is not in the pool.
	ErrNoSuchCredential = errors.New("creds: no such credential")
	// ErrNoSuchAccount: the account ID is not in the pool.
	ErrNoSuchAccount = errors.New("creds: no such account")
	// ErrLeaseLost: the lease is not live any more (it expired, was
	// released, or its credential was removed). The holder must stop using
	// the credential.
	ErrLeaseLost = errors.New("creds: lease lost")
	// ErrCanceled: Acquire gave up because its context ended. The error
	// also matches the context's error (context.Canceled or
	// context.DeadlineExceeded).
	ErrCanceled = errors.New("creds: acquire canceled")
	// ErrClosed: the Pool was closed.
	ErrClosed = errors.New("creds: pool closed")
	// ErrInvalid: a credential definition or an argument is not valid; the
	// error names the field.
	ErrInvalid = errors.New("creds: invalid")
	// ErrNeverFits: the cost asked for is above a cost limit of every
	// credential the handle may use, or of every one of them that is not
	// disabled (it fits only disabled ones), so no wait would end while
	// they stay disabled. An acquire already waiting gets it when the
	// credentials that take its cost are disabled. When every credential
	// the handle may use is disabled, an acquire waits instead. The error
	// is a *CostError.
	ErrNeverFits = errors.New("creds: cost never fits")
)

// CostError is returned by Acquire for a cost that never fits.
type CostError struct {
	Cost int64
	// Max is the largest cost any credential of the handle can take; when
	// Disabled is set, any usable (not disabled) one.
	Max int64
	// Limits names the credential and cost limit that set Max:
	// "key-a cost=6000/10s".
	Limits string
	// Disabled names a disabled credential that would take Cost: the cost
	// fits only disabled credentials ("" when none takes it either).
	Disabled string
}

func (e *CostError) Error() string {
	which := "credential"
	if e.Disabled != "" {
		which = "usable credential"
	}
	msg := fmt.Sprintf("%s: cost %d is above the largest any %s takes (%d", ErrNeverFits, e.Cost, which, e.Max)
	if e.Limits != "" {
		msg += ", credential " + e.Limits
	}
	msg += ")"
	if e.Disabled != "" {
		msg += "; it fits only disabled credentials (" + e.Disabled + ")"
	}
	return msg
}

// Is makes errors.Is(err, ErrNeverFits) hold.
func (e *CostError) Is(target error) bool { return target == ErrNeverFits }

// UnavailableError is returned by TryAcquire when no credential is usable.
type UnavailableError struct {
	// RetryAfter is when a cooldown, lease or rate window ends next; -1
	// when only a release or an admin change can free a credential.
	RetryAfter time.Duration
}

func (e *UnavailableError) Error() string {
	if e.RetryAfter < 0 {
		return ErrNoneAvailable.Error() + " (waiting for a release)"
	}
	return fmt.Sprintf("%s (next one in %s)", ErrNoneAvailable, e.RetryAfter)
}

// Is makes errors.Is(err, ErrNoneAvailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrNoneAvailable }

// DefinitionError names the field of a credential or account definition
// that is wrong.
type DefinitionError struct {
	Index   int    // position in the slice given to Register or Define
	Field   string // "id", "max_concurrent", "rate", "limits", "account"
	Problem string
	// Of is the list the definition is in: "credentials" (when empty) or
	// "accounts".
	Of string
}

func (e *DefinitionError) Error() string {
	of := e.Of
	if of == "" {
		of = "credentials"
	}
	return fmt.Sprintf("creds: %s[%d].%s: %s", of, e.Index, e.Field, e.Problem)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *DefinitionError) Is(target error) bool { return target == ErrInvalid }
