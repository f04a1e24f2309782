"""Evidence primitives shared by the signer and the offline verifier: records, trees, checkpoints, bundles."""
