//go:build !linux

package pydata

import (
	"context"
	"io"

	"github.com/stockade/stockade/jail"
)

// Provide provides nothing where there are no jails to provide for.
func (FontCache) Provide(context.Context, jail.Spec, io.Writer) (jail.Provision, error) {
	return jail.Provision{}, nil
}
