package enqueue

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// input is the Source opened for one reading after another.
type input struct {
	src     Source
	tempDir string
	spool   *os.File      // a Reader's copy
	spoolW  *bufio.Writer // while the first reading writes it
	closer  io.Closer     // the reading open now
}

// open returns the reader of the next reading. The first reading of a
// Reader copies it into a temporary file for the next ones.
func (in *input) open(first bool) (io.Reader, error) {
	if in.closer != nil {
		_ = in.closer.Close()
		in.closer = nil
	}
	if in.src.Path == "" {
		if first {
			f, err := os.CreateTemp(in.tempDir, "keyfleet-enqueue-*.jsonl")
			if err != nil {
				return nil, classify(ErrInput, "copying %s to a temporary file: %w", in.src.Name, err)
			}
			in.spool, in.spoolW = f, bufio.NewWriterSize(f, 1<<20)
			return io.TeeReader(in.src.Reader, in.spoolW), nil
		}
		if _, err := in.spool.Seek(0, io.SeekStart); err != nil {
			return nil, classify(ErrInput, "reading %s's copy again: %w", in.src.Name, err)
		}
		return in.spool, nil
	}
	f, err := os.Open(in.src.Path)
	if err != nil {
		return nil, classify(ErrInput, "cannot read the items: %w", err)
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		_ = f.Close()
		if err == nil {
			err = fmt.Errorf("%s is a directory", in.src.Path)
		}
		return nil, classify(ErrInput, "cannot read the items: %w", err)
	}
	in.closer = f
	return f, nil
}

// endFirst completes the copy of a Reader after its first reading.
func (in *input) endFirst() error {
	if in.spoolW == nil {
		return nil
	}
	err := in.spoolW.Flush()
	in.spoolW = nil
	if err != nil {
		return classify(ErrInput, "copying %s to a temporary file: %w", in.src.Name, err)
	}
	return nil
}

// readErr is a failure to read the input (an *http.MaxBytesError for a
// body over its bound stays visible to errors.As).
func (in *input) readErr(err error) error {
	return classify(ErrInput, "reading %s: %w", in.src.Name, err)
}

// changed is a later reading that found other content than the first.
func (in *input) changed(err error) error {
	return classify(ErrInput, "%s changed while it was being enqueued (%v)", in.src.Name, err)
}

func (in *input) close() {
	if in.closer != nil {
		_ = in.closer.Close()
	}
	if in.spool != nil {
		_ = in.spool.Close()
		_ = os.Remove(in.spool.Name())
	}
}
