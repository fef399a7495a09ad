//! The container image, built with buildah and run with podman: `scripts/test --tier image`.

mod container;
