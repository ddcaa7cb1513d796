"""A fake Kubernetes API server on 127.0.0.1 that speaks real HTTP/1.1 to the real kubernetes client, and
answers the way the API server does: resourceVersions, watches from a resourceVersion with bookmarks and
410 once compacted, preconditions, merge / strategic / JSON patches, subresources.

`cluster.FakeCluster` is the cluster's state with the test's controls over it (pods, Events, faults,
dropped watches); `objects` serves any other kind once registered, as a CRD or a core kind would be;
`pods` the writes to a pod and its subresources; `patches` the patch semantics; `watch` the streams;
`server.FakeAPIServer` the sockets and the routing; `node` the Node the daemon under test runs on.
"""
