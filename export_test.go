package phobos

import "context"

// ConnectLocal connects a second client to c's embedded cluster, as
// another driver program would connect to a running cluster.
func ConnectLocal(ctx context.Context, c *Client) (*Client, error) {
	return Connect(ctx, c.local.head.Addr(), c.local.token)
}
