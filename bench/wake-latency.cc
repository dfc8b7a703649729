// Wake-up latency probe: how long one thread takes to wake another on this machine, by three means —
// a condition variable (futex), an eventfd watched by epoll (what libuv, and so a Node.js event loop,
// sleeps in), and a spin on a shared flag. Every collective that hora awaits from JavaScript crosses
// between the JS thread and the communication thread twice, so this is the floor under small-message
// latency. Build and run:  g++ -O2 -pthread bench/wake-latency.cc -o /tmp/wake-latency && /tmp/wake-latency
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
int main() {
  const int N = 20000;
  { // condvar ping-pong
    std::mutex m; std::condition_variable cv; int turn = 0;
    std::thread t([&] { for (int i = 0; i < N; i++) { std::unique_lock<std::mutex> l(m); cv.wait(l, [&] { return turn == 1; }); turn = 0; cv.notify_one(); } });
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; i++) { std::unique_lock<std::mutex> l(m); turn = 1; cv.notify_one(); cv.wait(l, [&] { return turn == 0; }); }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N;
    t.join(); printf("condvar round trip %.1f us\n", us);
  }
  { // eventfd + epoll ping-pong
    int a = eventfd(0, 0), b = eventfd(0, 0);
    std::thread t([&] { int ep = epoll_create1(0); epoll_event ev{EPOLLIN, {}}; epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev);
      for (int i = 0; i < N; i++) { epoll_event out; epoll_wait(ep, &out, 1, -1); uint64_t v; read(a, &v, 8); v = 1; write(b, &v, 8); } });
    int ep = epoll_create1(0); epoll_event ev{EPOLLIN, {}}; epoll_ctl(ep, EPOLL_CTL_ADD, b, &ev);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; i++) { uint64_t v = 1; write(a, &v, 8); epoll_event out; epoll_wait(ep, &out, 1, -1); read(b, &v, 8); }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N;
    t.join(); printf("eventfd+epoll round trip %.1f us\n", us);
  }
  { // spin ping-pong
    std::atomic<int> f{0};
    std::thread t([&] { for (int i = 0; i < N; i++) { while (f.load() != 1) {} f.store(0); } });
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; i++) { f.store(1); while (f.load() != 0) {} }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N;
    t.join(); printf("spin round trip %.2f us\n", us);
  }
}
