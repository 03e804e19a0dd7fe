// Owns the tests' shared precompiled header (see CMakeLists.txt); does nothing when run.
int main() { return 0; }
