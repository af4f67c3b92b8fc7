package phobos

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/raylet"
	"github.com/phobos-project/phobos/runtime/wire"
)

// Object is data a driver stored in the cluster with Put. Graphs the same
// client submits read it (tensor.FromObject(o.ID, o.Meta)); another
// client's jobs are refused, since it stays only until Release or until
// the client that put it closes. It lives on one raylet and cannot be rebuilt: if that
// raylet is lost, jobs reading it fail and the data must be put again.
type Object struct {
	ID   dag.ObjectID
	Meta dag.Meta
	Size int64

	c        *Client
	released atomic.Bool
}

// PutFloat64s stores data, of the given shape, in the cluster.
func (c *Client) PutFloat64s(ctx context.Context, data []float64, shape []int64) (*Object, error) {
	return c.Put(ctx, dag.Meta{DType: dag.Float64, Shape: shape}, dag.Float64sAsBytes(data))
}

// PutInt64s stores data, of the given shape, in the cluster.
func (c *Client) PutInt64s(ctx context.Context, data []int64, shape []int64) (*Object, error) {
	return c.Put(ctx, dag.Meta{DType: dag.Int64, Shape: shape}, dag.Int64sAsBytes(data))
}

// Put stores data described by m on a raylet (one on this node if there is
// one) and registers it with the leader. The bytes go straight to the
// raylet, checked by CRC-32C; data may be reused once Put returns.
func (c *Client) Put(ctx context.Context, m dag.Meta, data []byte) (*Object, error) {
	if m.DType.Size() > 1 && int64(len(data)) != m.Bytes() {
		return nil, dag.Errorf(dag.KindInvalidArgument, "phobos: put: %d bytes for %v%v, which takes %d", len(data), m.DType, m.Shape, m.Bytes())
	}
	id, err := c.nextPutID(ctx)
	if err != nil {
		return nil, err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("phobos: put: %w", err)
	}
	var target *wire.RayletInfo
	for i := range st.Raylets {
		r := &st.Raylets[i]
		if r.State != "alive" {
			continue
		}
		if target == nil || (onThisNode(r.Addr) && !onThisNode(target.Addr)) {
			target = r
		}
	}
	if target == nil {
		return nil, dag.Errorf(dag.KindUnavailable, "phobos: put: no raylet is alive to hold the object")
	}
	s, err := c.peer(ctx, target.Addr)
	if err != nil {
		return nil, fmt.Errorf("phobos: put: raylet %s: %w", target.ID, err)
	}
	if err := raylet.PutObject(ctx, s, id, dag.EncodeMeta(m), data); err != nil {
		return nil, fmt.Errorf("phobos: put on raylet %s: %w", target.ID, err)
	}
	if err := c.head.Call(ctx, wire.MethodPutObject, wire.PutObject{ID: id, Raylet: target.ID, Size: int64(len(data))}, nil); err != nil {
		return nil, fmt.Errorf("phobos: put: register %s: %w", id, err)
	}
	o := &Object{ID: id, Meta: m, Size: int64(len(data)), c: c}
	c.mu.Lock()
	c.puts = append(c.puts, o)
	c.mu.Unlock()
	return o, nil
}

// Release frees the object in the cluster. Jobs still reading it fail.
func (o *Object) Release(ctx context.Context) error {
	if o.released.Swap(true) {
		return nil
	}
	return o.c.head.Call(ctx, wire.MethodReleaseObject, wire.ObjectRefMsg{ID: o.ID}, nil)
}

// nextPutID returns a fresh object ID: the client's own task ID (allocated
// once, through Raft, so no two clients collide) and a counter.
func (c *Client) nextPutID(ctx context.Context) (dag.ObjectID, error) {
	c.mu.Lock()
	task := c.putTask
	c.mu.Unlock()
	if task == 0 {
		var req wire.AllocTask
		rand.Read(req.RequestID[:])
		var rep wire.Allocated
		if err := c.head.Call(ctx, wire.MethodAllocTask, req, &rep); err != nil {
			return dag.ObjectID{}, fmt.Errorf("phobos: put: allocate an ID: %w", err)
		}
		c.mu.Lock()
		if c.putTask == 0 {
			c.putTask = rep.Task
		}
		task = c.putTask
		c.mu.Unlock()
	}
	n := c.putSeq.Add(1)
	return dag.NewObjectID(dag.PackSubtaskID(task, 1, uint64(n)), 0), nil
}

// onThisNode reports whether addr is one of this machine's addresses.
func onThisNode(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
