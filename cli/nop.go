package cli

import (
	"context"
	"net"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/transport"
)

// nopHandler refuses calls on a client-side session.
type nopHandler struct{}

func (nopHandler) HandleCall(context.Context, *transport.Session, transport.Method, transport.Body) (any, error) {
	return nil, dag.Errorf(dag.KindInvalidArgument, "this command serves no calls")
}
func (nopHandler) HandleMessage(*transport.Session, transport.Method, transport.Body) {}
func (nopHandler) HandleStream(_ *transport.Session, st net.Conn)                     { st.Close() }
