"""Pod sources: manifests (files, directories, stdin) and API objects, to `PodView`s."""
