#pragma once
// One long-lived helper thread that runs one job at a time: start(job) hands it over, wait()
// blocks until it is done (rethrowing what it threw). Cheaper per step than a thread per job;
// the CPU engine computes constraint masks on it while the forward pass runs.
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace ft {

class HelperThread {
 public:
  HelperThread() : t_([this] { loop(); }) {}
  ~HelperThread() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  HelperThread(const HelperThread&) = delete;
  HelperThread& operator=(const HelperThread&) = delete;

  void start(std::function<void()> job) {
    std::lock_guard<std::mutex> l(m_);
    job_ = std::move(job);
    busy_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || (busy_ && job_); });
      if (stop_) return;
      auto job = std::move(job_);
      job_ = nullptr;
      l.unlock();
      std::exception_ptr e;
      try {
        job();
      } catch (...) {
        e = std::current_exception();
      }
      l.lock();
      error_ = e;
      busy_ = false;
      cv_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread t_;
};

}  // namespace ft
