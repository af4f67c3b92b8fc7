package head

import (
	"context"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/wire"
	"github.com/phobos-project/phobos/transport"
)

// handleMeta serves the methods about the replicated metadata itself
// (wire methods 60-79). Unknown methods end here.
func (s *Server) handleMeta(ctx context.Context, sess *transport.Session, m transport.Method, b transport.Body) (any, error) {
	return nil, dag.Errorf(dag.KindInvalidArgument, "head %s: unknown method %d (is the caller a newer version?)", s.cfg.ID, m)
}

// clusterStatus describes the heads (as this head sees them) and raylets.
func (s *Server) clusterStatus() wire.ClusterStatus {
	st := s.node.Stats()
	leaderID, _ := s.node.Leader()
	out := wire.ClusterStatus{Leader: leaderID, Term: st.Term}
	servers, err := s.node.Servers()
	if err != nil {
		servers = []raftmeta.Server{{ID: s.cfg.ID, Addr: s.addr}}
	}
	for _, sv := range servers {
		h := wire.HeadInfo{ID: sv.ID, Addr: sv.Addr, Role: "follower"}
		if sv.ID == leaderID {
			h.Role = "leader"
		}
		if sv.ID == s.cfg.ID {
			h.Role = st.State
			h.CommitIndex = st.CommitIndex
			h.Term = st.Term
		}
		out.Heads = append(out.Heads, h)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.node.Raylets() {
		info := wire.RayletInfo{ID: r.ID, Addr: r.Addr, Slots: r.Slots, State: "registered"}
		if s.sched != nil {
			info.State = "lost"
			if idx, ok := s.sched.Raylet(r.ID); ok && int(idx) < len(s.raylets) && s.raylets[idx] != nil {
				info.State = "alive"
				info.Store = s.sched.raylets[idx].store
			}
		}
		out.Raylets = append(out.Raylets, info)
	}
	return out
}
