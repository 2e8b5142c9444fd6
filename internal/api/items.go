package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// GET /api/batches/{id}/items/{item}: where one item is, as `producer item
// show --json` prints it (itemview). The item's error and output are text
// a job or an API wrote: they are in the answer only for a reader with the
// admin token (as /api/batches/{id}/results needs it), and otherwise left
// out ("text_hidden": true); its state, attempts, key, reason class and
// times are for everyone. An item ID may hold slashes: the rest of the
// path is the ID.

// itemTimeout bounds one item's reading (a waiting item is looked for
// among its batch's waiting messages).
const itemTimeout = 30 * time.Second

// serveItem: GET /api/batches/{id}/items/{item...}.
func (a *API) serveItem(rw http.ResponseWriter, r *http.Request) {
	batch, item := r.PathValue("id"), r.PathValue("item")
	for _, c := range []struct{ what, id string }{{"batch", batch}, {"item", item}} {
		if err := queue.CheckID(c.what, c.id); err != nil {
			a.fail(rw, r, "item refused", opsInvalid(err))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), itemTimeout)
	defer cancel()
	it, err := itemview.Read(ctx, a.q, batch, item)
	switch {
	case errors.Is(err, itemview.ErrNoItem):
		a.fail(rw, r, "item refused", ops.Errorf(ops.ErrNotFound, "no item %q in batch %q: no message waits for it, and it has no result "+
			"and no dead letter (never enqueued, or its records aged out)", item, batch))
		return
	case err != nil:
		a.fail(rw, r, "reading an item failed", unavailable(err))
		return
	}
	if !a.Authorized(r) {
		it = it.Public()
	}
	WriteJSON(rw, http.StatusOK, it)
}
