package creds

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Account defines one account of the pool: what an API limits, rather
// than a key (an OpenAI organization or project, an Anthropic workspace,
// an Azure OpenAI resource). Every credential of an account, and of the
// accounts inside it, draws on its limits: a start needs room in its
// credential's limits, its account's and every enclosing account's, and
// takes its share of all of them at once, or of none. What a reply says
// of the room left (rate-limit headers, a 429, a bare 429's slowing)
// paces the whole account the credential belongs to. It holds no secret.
type Account struct {
	// ID names the account; see ValidID. Accounts and credentials of a
	// pool have distinct IDs.
	ID string
	// Account is the enclosing account ("" none): its limits bind this
	// account's keys as well.
	Account string
	// Limits are the account's limits, in the forms of a credential's
	// (see Limit). None: the account only shares what its keys' replies
	// say.
	Limits []Limit
}

// MaxAccountDepth bounds how many accounts enclose a credential (its own
// included).
const MaxAccountDepth = 8

// acctEntity is the pool's name of account id in its scripts: "*<id>"
// ('*' is never in an ID).
func acctEntity(id string) string {
	if id == "" {
		return ""
	}
	return "*" + id
}

// Definitions are what Define syncs into the pool: its accounts, its
// credentials and its reserve.
type Definitions struct {
	Accounts    []Account
	Credentials []Credential
	// Reserve is the share of every limit (of keys and accounts) that
	// starts of priority PriorityFirst..PriorityLast leave free for
	// interactive ones (Request.Interactive): 0 (none) to ReserveMax.
	Reserve float64
}

// ReserveMax bounds Definitions.Reserve: batches keep at least a tenth of
// every limit.
const ReserveMax = 0.9

// parseAccounts validates account definitions against the credentials'
// IDs: every problem is reported, each naming its field; an unknown or
// cyclic enclosing account is one. It returns the encoded limits of each.
func parseAccounts(accts []Account, credIDs map[string]int) ([]string, error) {
	var errs []error
	seen := make(map[string]int, len(accts))
	enc := make([]string, len(accts))
	bad := func(i int, field, msg string) {
		errs = append(errs, &DefinitionError{Index: i, Field: field, Problem: msg, Of: "accounts"})
	}
	for i, a := range accts {
		if err := ValidID(a.ID); err != nil {
			bad(i, "id", err.Error())
		} else if j, dup := seen[a.ID]; dup {
			bad(i, "id", fmt.Sprintf("%q is used twice (also accounts[%d])", a.ID, j))
		} else if j, dup := credIDs[a.ID]; dup {
			bad(i, "id", fmt.Sprintf("%q is also the ID of credentials[%d]: accounts and credentials need distinct IDs", a.ID, j))
		} else {
			seen[a.ID] = i
		}
		for j, l := range a.Limits {
			if err := l.Validate(); err != nil {
				bad(i, fmt.Sprintf("limits[%d]", j), err.Error())
			}
		}
		enc[i] = encodeLimits(a.Limits)
	}
	for i, a := range accts {
		if a.Account == "" {
			continue
		}
		if _, ok := seen[a.Account]; !ok {
			bad(i, "account", fmt.Sprintf("%q is not an account of the pool", a.Account))
			continue
		}
		chain := []string{a.ID}
		for up := a.Account; up != ""; up = accts[seen[up]].Account {
			if up == a.ID {
				bad(i, "account", fmt.Sprintf("accounts enclose each other in a cycle: %s", strings.Join(append(chain, up), " -> ")))
				break
			}
			chain = append(chain, up)
			if len(chain) > MaxAccountDepth {
				bad(i, "account", fmt.Sprintf("more than %d accounts enclose each other: %s", MaxAccountDepth, strings.Join(chain, " -> ")))
				break
			}
			if _, ok := seen[up]; !ok {
				break // reported on its own line
			}
		}
	}
	return enc, errors.Join(errs...)
}

// Define adds accounts and credentials to the pool, or syncs their
// definitions, and sets the pool's reserve, as Register does for
// credentials: a definition changed since it was last registered
// replaces what the pool holds, a limit changed at run time survives
// other processes starting with the same definitions, and states, rests
// and counters are kept. Accounts and credentials not in d are left
// alone. Every invalid definition is reported, each naming its field.
func (p *Pool) Define(ctx context.Context, d Definitions) error {
	enc, err := parseDefs(d.Credentials)
	credIDs := make(map[string]int, len(d.Credentials))
	for i, c := range d.Credentials {
		credIDs[c.ID] = i
	}
	aenc, aerr := parseAccounts(d.Accounts, credIDs)
	known := make(map[string]bool, len(d.Accounts))
	for _, a := range d.Accounts {
		known[a.ID] = true
	}
	var errs []error
	for i, c := range d.Credentials {
		if c.Account != "" && !known[c.Account] {
			errs = append(errs, &DefinitionError{Index: i, Field: "account", Problem: fmt.Sprintf("%q is not an account of the pool", c.Account)})
		}
	}
	if d.Reserve < 0 || d.Reserve > ReserveMax {
		errs = append(errs, fmt.Errorf("%w: reserve must be 0 to %g, got %g", ErrInvalid, ReserveMax, d.Reserve))
	}
	if err := errors.Join(append([]error{err, aerr}, errs...)...); err != nil {
		return err
	}
	args := make([]any, 0, 3+3*len(d.Accounts)+5*len(d.Credentials))
	args = append(args, p.waiterTTL.Microseconds(), fmt.Sprintf("%g", d.Reserve), len(d.Accounts))
	for i, a := range d.Accounts {
		args = append(args, acctEntity(a.ID), acctEntity(a.Account), aenc[i])
	}
	for i, c := range d.Credentials {
		args = append(args, c.ID, c.MaxConcurrent, enc[i], strings.Join(c.Groups, ","), acctEntity(c.Account))
	}
	if err := registerScript.Run(ctx, p.scripts, []string{p.keys.creds}, args...).Err(); err != nil {
		return fmt.Errorf("creds: register %d accounts and %d credentials in pool %q: %w", len(d.Accounts), len(d.Credentials), p.name, err)
	}
	if p.group != "" {
		if err := p.joinGroup(ctx, p.group, p.only); err != nil {
			return err
		}
	}
	return nil
}

// SetAccountLimits replaces an account's limits for every process at
// once (nil or empty: none); the next decision anywhere applies them. A
// limit kept across the change keeps its history.
func (p *Pool) SetAccountLimits(ctx context.Context, id string, limits []Limit) error {
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%w: limits[%d]: %w", ErrInvalid, i, err)
		}
	}
	if err := ValidID(id); err != nil {
		return fmt.Errorf("%w: account id %w", ErrInvalid, err)
	}
	_, err := p.adminAccount(ctx, id, "limits", "", encodeLimits(limits))
	return err
}
